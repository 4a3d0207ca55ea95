//! The idle announcement: how a worker tells producers' wake-up trigger
//! (migration 7) that it sleeps, closes the race with inserts that could
//! not see the announcement yet, and withdraws it when it has work.

use std::time::{Duration, Instant};

use super::Worker;

/// How long a worker that just published keeps polling, every
/// [`IDLE_LINGER_POLL`], before it announces that it sleeps. A steady
/// stream (gaps shorter than this) then never flips the worker between busy
/// and idle: no announcement, no withdrawal, and producers' commits send no
/// `NOTIFY` (each one takes PostgreSQL's global notify lock and wakes the
/// relay for one event); a lone event after a quiet spell still wakes it at
/// once. Events that arrive meanwhile wait at most one poll.
pub(super) const IDLE_LINGER: Duration = Duration::from_millis(25);
/// The poll while lingering.
pub(super) const IDLE_LINGER_POLL: Duration = Duration::from_millis(2);

/// How long, at most, an announcement waits for the inserts that could not
/// see it to commit before the last look.
const ANNOUNCE_SETTLE_MAX: Duration = Duration::from_millis(50);
/// How often it looks meanwhile.
const ANNOUNCE_SETTLE_POLL: Duration = Duration::from_millis(1);

impl Worker {
    /// Whether the schema has the idle wake-up trigger (asked once; a
    /// schema switched to another mode is seen at the relay's restart).
    pub(super) async fn idle_trigger(&mut self) -> bool {
        if self.idle_trigger.is_none() {
            match self.deps.store.idle_trigger_installed().await {
                Ok(installed) => self.idle_trigger = Some(installed),
                Err(e) => {
                    tracing::debug!(error = %e.with_causes(), "could not look for the wake-up trigger; polling");
                    return false;
                }
            }
        }
        self.idle_trigger == Some(true)
    }

    /// Whether an empty claim should poll again soon instead of announcing:
    /// the worker published within [`IDLE_LINGER`], has not announced yet,
    /// and producers' commits would wake it (it listens, and the schema has
    /// the idle trigger). Without the trigger the idle polls are unchanged.
    pub(super) async fn lingering(&mut self) -> bool {
        self.idle_announced.is_none()
            && self.last_work.is_some_and(|at| at.elapsed() < IDLE_LINGER)
            && self.deps.config.listen
            && self.idle_trigger().await
    }

    /// Waits, briefly, until every transaction with an id below `xid` has
    /// ended: inserts that ran before the announcement could be seen have
    /// then committed. A long writer elsewhere ends the wait early; the
    /// poll covers what it leaves.
    async fn wait_for_transactions_below(&mut self, xid: i64) {
        let started = Instant::now();
        while started.elapsed() < ANNOUNCE_SETTLE_MAX {
            match self.deps.store.transactions_ended_below(xid).await {
                Ok(true) => return,
                Ok(false) => tokio::time::sleep(ANNOUNCE_SETTLE_POLL).await,
                Err(e) => {
                    tracing::debug!(error = %e.with_causes(), "could not read the oldest running transaction; polling");
                    return;
                }
            }
        }
    }

    /// Tells producers' wake-up trigger that a relay sleeps, for `ttl`.
    /// `false` if it failed (the poll still finds every row).
    pub(super) async fn announce_idle(&mut self, ttl: Duration) -> bool {
        if let Some(retracting) = self.retracting.take() {
            let _ = retracting.await;
        }
        match self.deps.store.idle_announce(ttl).await {
            Ok(()) => {
                self.idle_announced = Some(Instant::now());
                true
            }
            Err(e) => {
                tracing::debug!(error = %e.with_causes(), "could not announce that the relay is idle; polling");
                false
            }
        }
    }

    /// After a first announcement: waits until every insert that read the
    /// trigger's time before it has committed. Such an insert took its
    /// transaction id before reading, so below an id taken now.
    pub(super) async fn settle_after_announcing(&mut self) {
        match self.deps.store.transaction_id_new().await {
            Ok(xid) => self.wait_for_transactions_below(xid).await,
            Err(e) => {
                tracing::debug!(error = %e.with_causes(), "could not take a transaction id after announcing; polling");
            }
        }
    }

    /// Withdraws the idle announcement, if any, when no other relay may be
    /// asleep on it (otherwise it lapses by itself).
    pub(super) async fn retract_idle(&mut self) {
        if self.idle_announced.take().is_some() && self.deps.ownership.alone() {
            if let Err(e) = self.deps.store.idle_retract().await {
                tracing::debug!(error = %e.with_causes(), "could not withdraw the idle announcement; it lapses by itself");
            }
        }
    }
}
