//! Partition ownership: which partitions this instance may relay, under
//! which fencing epoch, and until when.
//!
//! A lease task renews held leases every third of the lease, shares the
//! partitions out among live instances (partition `p` goes to the
//! `p % n`-th instance in sorted order) and takes the ones assigned to this
//! instance as soon as they are free. Partitions assigned elsewhere are
//! handed to the worker to release *between* batches, so a partition is
//! never given up while one of its events is in flight.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::error::Result;
use crate::relay::store::Store;

#[derive(Debug, Clone, Copy)]
struct Held {
    epoch: i64,
    valid_until: Instant,
}

#[derive(Debug, Default)]
struct State {
    held: BTreeMap<i32, Held>,
    to_release: BTreeSet<i32>,
}

/// The partitions this instance holds; shared by the lease task and the
/// worker.
#[derive(Debug)]
pub struct Ownership {
    me: String,
    partitions: i32,
    lease: Duration,
    state: Mutex<State>,
    // Serialises ticks and releases so a renewal never resurrects a
    // partition the worker has just given up.
    ops: tokio::sync::Mutex<()>,
    closing: std::sync::atomic::AtomicBool,
    /// How many live instances the last lease round saw (this one among
    /// them; 0 before the first).
    members: std::sync::atomic::AtomicUsize,
}

/// What the worker may claim now.
#[derive(Debug, Clone, Default)]
pub struct Claimable {
    /// Partitions to claim from.
    pub partitions: Vec<i32>,
    /// Fencing epochs indexed by partition (-1 where not held).
    pub epochs: Vec<i64>,
}

impl Ownership {
    /// Nothing held yet.
    pub fn new(me: String, partitions: i32, lease: Duration) -> Arc<Self> {
        Arc::new(Ownership {
            me,
            partitions,
            lease,
            state: Mutex::new(State::default()),
            ops: tokio::sync::Mutex::new(()),
            closing: std::sync::atomic::AtomicBool::new(false),
            members: std::sync::atomic::AtomicUsize::new(0),
        })
    }

    /// Whether the last lease round saw no other live instance.
    pub fn alone(&self) -> bool {
        self.members.load(std::sync::atomic::Ordering::Acquire) <= 1
    }

    /// The lease length.
    pub fn lease(&self) -> Duration {
        self.lease
    }

    /// This instance's id.
    pub fn me(&self) -> &str {
        &self.me
    }

    /// The margin kept before a lease's end: no publishing that close to it.
    fn margin(&self) -> Duration {
        self.lease / 5
    }

    /// Partitions held with time to spare, minus those being handed over.
    pub fn claimable(&self) -> Claimable {
        let now = Instant::now() + self.margin();
        let st = self.state.lock().expect("ownership lock");
        let mut epochs = vec![-1; self.partitions as usize];
        let mut partitions = Vec::with_capacity(st.held.len());
        for (p, h) in &st.held {
            if h.valid_until > now && !st.to_release.contains(p) {
                partitions.push(*p);
                epochs[*p as usize] = h.epoch;
            }
        }
        Claimable { partitions, epochs }
    }

    /// Which partitions are still held with time to spare, indexed by
    /// partition (one lock for a whole call, not one per event).
    pub fn still_valid(&self) -> Vec<bool> {
        let now = Instant::now() + self.margin();
        let st = self.state.lock().expect("ownership lock");
        let mut valid = vec![false; self.partitions as usize];
        for (p, h) in &st.held {
            valid[*p as usize] = h.valid_until > now;
        }
        valid
    }

    /// Whether partitions wait to be handed over.
    pub fn has_pending_release(&self) -> bool {
        !self
            .state
            .lock()
            .expect("ownership lock")
            .to_release
            .is_empty()
    }

    /// How many partitions are held.
    /// How many partitions are held with a lease that has not lapsed.
    pub fn held_count(&self) -> usize {
        let now = Instant::now();
        let st = self.state.lock().expect("ownership lock");
        st.held.values().filter(|h| h.valid_until > now).count()
    }

    /// One round of the lease task: heartbeat, renew, rebalance, acquire.
    pub async fn tick(&self, store: &Store) -> Result<()> {
        let _ops = self.ops.lock().await;
        if self.closing.load(std::sync::atomic::Ordering::Acquire) {
            return Ok(());
        }
        let started = Instant::now();
        let live = store
            .instance_heartbeat_and_live(&self.me, self.lease)
            .await?;
        self.members
            .store(live.len(), std::sync::atomic::Ordering::Release);
        let n = live.len().max(1) as i32;
        let index = live.iter().position(|m| m == &self.me).unwrap_or(0) as i32;
        let assigned: BTreeSet<i32> = (0..self.partitions).filter(|p| p % n == index).collect();

        // Leases this instance knows lapsed are not renewed (the renewal
        // would find them lapsed too, or, by the few milliseconds the
        // database's time runs ahead, renew what acquiring takes back as
        // well): they are acquired again below if still assigned.
        let (previously, held): (Vec<i32>, Vec<i32>) = {
            let st = self.state.lock().expect("ownership lock");
            let held = st
                .held
                .iter()
                .filter(|(_, h)| h.valid_until > started)
                .map(|(p, _)| *p)
                .collect();
            (st.held.keys().copied().collect(), held)
        };
        let renewed = store
            .partition_lease_renew(&self.me, &held, self.lease)
            .await?;
        let want: Vec<i32> = assigned
            .iter()
            .copied()
            .filter(|p| !renewed.iter().any(|(q, _)| q == p))
            .collect();
        let acquired = store
            .partition_lease_acquire(&self.me, &want, self.lease)
            .await?;

        let valid_until = started + self.lease;
        let mut st = self.state.lock().expect("ownership lock");
        let before = st.held.len();
        st.held.clear();
        for (p, epoch) in renewed.into_iter().chain(acquired) {
            st.held.insert(p, Held { epoch, valid_until });
        }
        let lost = previously
            .iter()
            .filter(|p| !st.held.contains_key(p))
            .count();
        if lost > 0 {
            tracing::warn!(instance = %self.me, lost, "partition leases lost (expired or taken over)");
        }
        st.to_release = st
            .held
            .keys()
            .copied()
            .filter(|p| !assigned.contains(p))
            .collect();
        if st.held.len() != before {
            tracing::info!(
                instance = %self.me,
                held = st.held.len(),
                releasing = st.to_release.len(),
                members = live.len(),
                "partition ownership changed"
            );
        }
        Ok(())
    }

    /// Releases the partitions marked for hand-over; the worker calls it
    /// between batches. Returns how many were released.
    pub async fn release_pending(&self, store: &Store) -> Result<usize> {
        let _ops = self.ops.lock().await;
        let release: Vec<i32> = {
            let st = self.state.lock().expect("ownership lock");
            st.to_release.iter().copied().collect()
        };
        if release.is_empty() {
            return Ok(0);
        }
        store.partition_release(&self.me, &release).await?;
        let mut st = self.state.lock().expect("ownership lock");
        for p in &release {
            st.held.remove(p);
            st.to_release.remove(p);
        }
        Ok(release.len())
    }

    /// Releases everything and leaves the group (graceful stop).
    pub async fn release_all(&self, store: &Store) -> Result<()> {
        let _ops = self.ops.lock().await;
        self.closing
            .store(true, std::sync::atomic::Ordering::Release);
        let all: Vec<i32> = {
            let mut st = self.state.lock().expect("ownership lock");
            let all = st.held.keys().copied().collect();
            st.held.clear();
            st.to_release.clear();
            all
        };
        store.partition_release(&self.me, &all).await?;
        store.instance_remove(&self.me).await
    }
}
