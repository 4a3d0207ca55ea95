//! Published batches and their acknowledgement: usually riding on the next
//! claim, on their own when no claim follows.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use uuid::Uuid;

use super::Worker;
use crate::event::Event;
use crate::relay::config::Retention;
use crate::relay::deliver::outcomes::Settlement;
use crate::relay::observe::BatchReport;
use crate::relay::store::RowRefs;

/// How often an acknowledgement that does not ride on a claim is tried
/// through a database blip before its events are left to be delivered
/// again.
const ACK_TRIES: u32 = 5;
/// The wait after the first failed try; it doubles after each.
const ACK_FIRST_RETRY: Duration = Duration::from_millis(50);

/// A published batch whose deliveries still await their acknowledgement.
#[derive(Debug)]
pub(crate) struct Published {
    /// Events claimed.
    pub claimed: usize,
    /// When the batch was claimed.
    pub started: Instant,
    /// What each event came to.
    pub settlement: Settlement,
    /// Row locations of the claimed events, by id.
    pub ctids: HashMap<Uuid, String>,
    /// The claims that joined the batch in flight (`ahead.rs`), each
    /// reported as a batch of its own: its size, when it was claimed, and
    /// (in `joined_ids`) its events.
    pub joined: Vec<(usize, Instant)>,
    /// The claim (1 = the first that joined) of each event that joined;
    /// the others are the first claim's.
    pub joined_ids: HashMap<Uuid, usize>,
}

impl Published {
    /// The delivered events' rows, for the acknowledgement.
    pub fn refs(&self) -> RowRefs {
        let delivered = &self.settlement.delivered;
        let mut refs = RowRefs {
            ctids: Vec::with_capacity(delivered.len()),
            ids: Vec::with_capacity(delivered.len()),
        };
        for e in delivered {
            if let Some(ct) = self.ctids.get(&e.id) {
                refs.ctids.push(ct.clone());
                refs.ids.push(e.id);
            }
        }
        refs
    }

    /// Every claimed event was delivered: a batch claimed meanwhile may be
    /// published (no successor can overtake an event to be retried).
    pub fn all_delivered(&self) -> bool {
        let s = &self.settlement;
        s.outage.is_none() && s.delivered.len() == self.claimed
    }
}

impl Worker {
    /// The acknowledgement of the batch awaiting one, to ride on the next
    /// claim.
    pub(super) fn unacked_refs(&self) -> RowRefs {
        self.unacked
            .as_ref()
            .map(Published::refs)
            .unwrap_or_default()
    }

    /// Acknowledges the batch awaiting one on its own (when no claim
    /// follows), retrying briefly through a database blip. Returns `false`
    /// if that failed; the batch then stays unacknowledged.
    pub(super) async fn acknowledge_unacked(&mut self) -> bool {
        let Some(done) = self.unacked.take() else {
            return true;
        };
        if done.settlement.delivered.is_empty() {
            self.report(done);
            return true;
        }
        let ids: Vec<Uuid> = done.settlement.delivered.iter().map(|e| e.id).collect();
        let keep = self.deps.config.retention == Retention::Keep;
        let mut delay = ACK_FIRST_RETRY;
        for attempt in 1..=ACK_TRIES {
            match self.deps.store.event_mark_delivered(&ids, keep).await {
                Ok(_) => {
                    self.report(done);
                    return true;
                }
                Err(e) => {
                    tracing::warn!(error = %e.with_causes(), attempt, "acknowledgement failed; retrying");
                    self.sleep(delay).await;
                    delay *= 2;
                }
            }
        }
        self.unacked = Some(done);
        false
    }

    /// [`Worker::acknowledge_unacked`], giving the batch up if it fails: its
    /// events are then delivered again (at least once).
    pub(super) async fn acknowledge_or_give_up(&mut self) {
        if !self.acknowledge_unacked().await {
            if let Some(lost) = self.unacked.take() {
                tracing::warn!(
                    events = lost.settlement.delivered.len(),
                    "could not acknowledge delivered events; they will be delivered again"
                );
            }
        }
    }

    /// The batch awaiting acknowledgement was acknowledged by a claim:
    /// count it.
    pub(super) fn unacked_acknowledged(&mut self) {
        if let Some(done) = self.unacked.take() {
            self.report(done);
        }
    }

    /// Counts an acknowledged batch and tells the observer: one report
    /// per claim, so a batch others joined is counted as the claims it
    /// was (each at most `batch_size`); an outage goes with the last.
    fn report(&self, done: Published) {
        if done.joined.is_empty() {
            let s = &done.settlement;
            self.report_one(
                done.claimed,
                &s.delivered,
                &s.retried,
                &s.dead,
                s.outage.as_deref(),
                done.started,
            );
            return;
        }
        let parts = done.joined.len() + 1;
        let of = |id: &Uuid| done.joined_ids.get(id).copied().unwrap_or(0);
        let mut delivered: Vec<Vec<Event>> = vec![Vec::new(); parts];
        let mut retried: Vec<Vec<(Event, String)>> = vec![Vec::new(); parts];
        let mut dead: Vec<Vec<(Event, String)>> = vec![Vec::new(); parts];
        let s = done.settlement;
        for e in s.delivered {
            delivered[of(&e.id)].push(e);
        }
        for r in s.retried {
            retried[of(&r.0.id)].push(r);
        }
        for d in s.dead {
            dead[of(&d.0.id)].push(d);
        }
        let first_claimed = done.claimed - done.joined.iter().map(|(n, _)| n).sum::<usize>();
        let claims = std::iter::once((first_claimed, done.started)).chain(done.joined);
        for (k, (claimed, started)) in claims.enumerate() {
            let outage = if k + 1 == parts {
                s.outage.as_deref()
            } else {
                None
            };
            self.report_one(
                claimed,
                &delivered[k],
                &retried[k],
                &dead[k],
                outage,
                started,
            );
        }
    }

    fn report_one(
        &self,
        claimed: usize,
        delivered: &[Event],
        retried: &[(Event, String)],
        dead_lettered: &[(Event, String)],
        outage: Option<&str>,
        started: Instant,
    ) {
        let report = BatchReport {
            claimed,
            delivered,
            retried,
            dead_lettered,
            outage,
            acked_at: chrono::Utc::now(),
            duration: started.elapsed(),
        };
        self.deps.stats.add(&report);
        if let Some(o) = &self.deps.observer {
            o.on_batch(&report);
        }
    }
}
