//! Claiming ahead: while a full batch is published, the next one is
//! claimed on its own task (acknowledging the batch before, in the same
//! statement); after a short batch (the worker has caught up), the next
//! claim waits a pace (`latency_budget_ms`) first, and is made only if the
//! batch's calls are still in flight by then (a slow request). If a claim
//! answers while calls are in flight, its events join the lanes
//! ([`InFlight::join`]) and the claim after it starts (at once after a full
//! claim, a pace later after a short one), up to [`JOINED_MAX`] claims
//! published as one: a slow
//! request then holds only its aggregate, not what was claimed after it.
//! What joined is acknowledged together, by the claim after the batch,
//! and never past an event that was not delivered (the lanes keep an
//! aggregate's later events behind it).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use std::time::Duration;

use tokio::sync::Notify;
use tokio::task::{JoinError, JoinHandle};
use uuid::Uuid;

use crate::error::Result;
use crate::event::Event;
use crate::relay::cursor::{ClaimMeta, Start};
use crate::relay::deliver::JOINED_MAX;
use crate::relay::store::{Claimed, RowRefs, Store};

/// What a claim ahead came to: `None` when it waited and the batch was
/// done first, so it claimed (and acknowledged) nothing.
pub(super) type Claiming = JoinHandle<Result<Option<Claimed>>>;

/// The claim of the next batch, running on its own task while a batch is
/// published.
pub(super) struct ClaimAhead {
    pub task: Claiming,
    pub start: Start,
    pub started: Instant,
    /// Tells a claim that waits first not to claim.
    pub cancel: Option<Arc<Notify>>,
}

impl ClaimAhead {
    /// Acknowledges `acked` and claims up to `batch_size` events of
    /// `partitions` other than `exclude`, from `start`, on its own task;
    /// `after` a wait, unless cancelled meanwhile.
    pub(super) fn spawn(
        store: Arc<Store>,
        partitions: Vec<i32>,
        batch_size: usize,
        (acked, exclude): (RowRefs, Vec<Uuid>),
        start: Start,
        after: Option<Duration>,
    ) -> Self {
        let started = Instant::now() + after.unwrap_or_default();
        let cancel = after.map(|_| Arc::new(Notify::new()));
        let waiting = cancel.clone();
        let task = tokio::spawn(async move {
            if let (Some(after), Some(cancel)) = (after, waiting) {
                tokio::select! {
                    _ = tokio::time::sleep(after) => {}
                    _ = cancel.notified() => return Ok(None),
                }
            }
            store
                .event_ack_and_claim(&partitions, batch_size, &acked, &exclude, start)
                .await
                .map(Some)
        });
        ClaimAhead {
            task,
            start,
            started,
            cancel,
        }
    }
}

/// A claim ahead that answered while the batch was in flight: what the
/// worker learns from it once the batch is done.
pub(super) struct Joined {
    pub start: Start,
    pub started: Instant,
    /// Its rows' meta and count; `Err`: it failed, and nothing joined.
    pub claim: std::result::Result<(Option<ClaimMeta>, usize), String>,
}

/// The batch being published, as claims ahead join it: what the lanes'
/// gate reads and each join adds to. Behind one lock, never contended:
/// the gate and the joins run on the worker's task, between its awaits.
pub(super) struct InFlight {
    /// Rows that could not be decoded, by id, with the reason.
    pub undecodable: HashMap<Uuid, String>,
    pub ctids: HashMap<Uuid, String>,
    /// Events claimed, the joined batches' included.
    pub claimed: usize,
    /// The claims that answered while the batch was in flight, in order.
    pub joined: Vec<Joined>,
    /// The claim (1 = the first that joined) of each event that joined.
    pub joined_ids: HashMap<Uuid, usize>,
    /// The claim now running, and where the next one starts.
    running: Option<(Start, Instant)>,
    /// Tells the claim now running not to claim, if it still waits.
    cancel: Option<Arc<Notify>>,
    /// How long a claim after a short one waits.
    pace: Duration,
    /// Every event claimed so far: the next claim excludes them.
    exclude: Vec<Uuid>,
    store: Arc<Store>,
    partitions: Vec<i32>,
    batch_size: usize,
}

impl InFlight {
    /// The batch `first` (its rows' locations and undecodable rows taken
    /// out of it), with `ahead` claiming the next one.
    pub(super) fn new(
        first: &mut Claimed,
        ahead: Option<&ClaimAhead>,
        store: Arc<Store>,
        partitions: Vec<i32>,
        batch_size: usize,
        pace: Duration,
    ) -> Self {
        InFlight {
            undecodable: std::mem::take(&mut first.undecodable),
            ctids: std::mem::take(&mut first.ctids),
            claimed: first.events.len(),
            joined: Vec::new(),
            joined_ids: HashMap::new(),
            running: ahead.map(|a| (a.start, a.started)),
            cancel: ahead.and_then(|a| a.cancel.clone()),
            pace,
            exclude: first.events.iter().map(|e| e.id).collect(),
            store,
            partitions,
            batch_size,
        }
    }

    /// The running claim answered while calls were in flight: its events
    /// join (returned), and, while fewer than [`JOINED_MAX`] claims are in
    /// this one, the claim after it starts (returned): at once after a
    /// full claim, a pace later after a short one.
    pub(super) fn join(
        &mut self,
        answer: std::result::Result<Result<Option<Claimed>>, JoinError>,
    ) -> (Vec<Event>, Option<Claiming>) {
        let Some((start, started)) = self.running.take() else {
            return (Vec::new(), None);
        };
        self.cancel = None;
        let next = match answer {
            Ok(Ok(Some(next))) => next,
            Ok(Ok(None)) => return (Vec::new(), None),
            Ok(Err(e)) => {
                self.joined.push(Joined {
                    start,
                    started,
                    claim: Err(e.with_causes()),
                });
                return (Vec::new(), None);
            }
            Err(panicked) => {
                self.joined.push(Joined {
                    start,
                    started,
                    claim: Err(format!("prefetch task failed: {panicked}")),
                });
                return (Vec::new(), None);
            }
        };
        let count = next.events.len();
        self.joined.push(Joined {
            start,
            started,
            claim: Ok((next.meta, count)),
        });
        self.undecodable.extend(next.undecodable);
        self.ctids.extend(next.ctids);
        self.claimed += count;
        self.exclude.extend(next.events.iter().map(|e| e.id));
        // Numbered as reported: the claims that found events, 1 the first.
        let claim = self.joined_claims().len();
        self.joined_ids
            .extend(next.events.iter().map(|e| (e.id, claim)));
        let full = count >= self.batch_size;
        // At most JOINED_MAX claims published as one, the first included:
        // a call stuck until its publish timeout does not keep the worker
        // claiming a pace apart all that time.
        let room = self.joined.len() + 1 < JOINED_MAX;
        let after = room.then(|| {
            // The first claim's start still stands: the cursor never
            // passes a pending row, and these rows are excluded by id.
            let ahead = ClaimAhead::spawn(
                self.store.clone(),
                self.partitions.clone(),
                self.batch_size,
                (RowRefs::default(), self.exclude.clone()),
                start,
                (!full).then_some(self.pace),
            );
            self.running = Some((ahead.start, ahead.started));
            self.cancel = ahead.cancel.clone();
            ahead.task
        });
        (next.events, after)
    }

    /// The claims that joined, as batches of their own: each one's size
    /// and when it was claimed.
    pub(super) fn joined_claims(&self) -> Vec<(usize, Instant)> {
        self.joined
            .iter()
            .filter_map(|j| j.claim.as_ref().ok().map(|(_, n)| (*n, j.started)))
            .filter(|(n, _)| *n > 0)
            .collect()
    }

    /// The claim still running when the batch was done, if any: `task`
    /// (handed back by the lanes) with where it started. One that still
    /// waits is told not to claim.
    pub(super) fn pending(&self, task: Option<Claiming>) -> Option<ClaimAhead> {
        let (start, started) = self.running?;
        if let Some(cancel) = &self.cancel {
            cancel.notify_one();
        }
        Some(ClaimAhead {
            task: task?,
            start,
            started,
            cancel: None,
        })
    }
}
