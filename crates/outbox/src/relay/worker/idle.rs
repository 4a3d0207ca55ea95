//! The idle announcement: how a worker tells producers' wake-up trigger
//! (migration 7) that it sleeps, closes the race with inserts that could
//! not see the announcement yet, and withdraws it when it has work; and the
//! idle phase that uses it.

use std::time::{Duration, Instant};

use tokio::task::JoinHandle;

use super::phase::{idle_wait, Phase};
use super::{Deps, Worker};
use crate::relay::ownership::Claimable;

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

/// What became of [`Announcement::keep_alive`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Announced {
    /// Nothing announced: not due, not wanted, or it failed (the poll still
    /// finds every row).
    No,
    /// A standing announcement was renewed.
    Renewed,
    /// The first announcement of this idle spell: look once more after
    /// [`Announcement::settle`].
    First,
}

/// Whether this worker has told producers that it sleeps, and what that
/// depends on. The fields change together: an announcement is made,
/// renewed and withdrawn only through these methods.
#[derive(Debug, Default)]
pub(super) struct Announcement {
    /// When this instance last announced that it sleeps (producers' wake-up
    /// trigger then notifies); `None` while it has work.
    at: Option<Instant>,
    /// When this instance last published a batch: for [`IDLE_LINGER`]
    /// after it, an empty claim polls again instead of announcing.
    last_work: Option<Instant>,
    /// A withdrawal still running off the publish path; the next
    /// announcement waits for it, so they cannot cross.
    retracting: Option<JoinHandle<()>>,
    /// Whether the schema has the idle wake-up trigger (`None`: not known
    /// yet).
    trigger: Option<bool>,
}

impl Announcement {
    /// The worker has work: from now on an empty claim lingers first, and
    /// a standing announcement is withdrawn.
    pub fn busy(&mut self, deps: &Deps) {
        self.last_work = Some(Instant::now());
        self.retract(deps);
    }

    /// Withdraws the announcement, if any, on its own task, when no other
    /// relay may be asleep on it (otherwise it lapses by itself).
    /// [`Announcement::retracted`] waits for it.
    pub fn retract(&mut self, deps: &Deps) {
        if self.at.take().is_none() || !deps.ownership.alone() {
            return;
        }
        let store = deps.store.clone();
        self.retracting = Some(tokio::spawn(async move {
            if let Err(e) = store.idle_retract().await {
                tracing::debug!(error = %e.with_causes(), "could not withdraw the idle announcement; it lapses by itself");
            }
        }));
    }

    /// Waits for a withdrawal still running, if any.
    pub async fn retracted(&mut self) {
        if let Some(retracting) = self.retracting.take() {
            let _ = retracting.await;
        }
    }

    /// Whether an empty claim should poll again soon instead of announcing:
    /// the worker published within [`IDLE_LINGER`], has not announced yet,
    /// and producers' commits would wake it (it listens, and the schema has
    /// the idle trigger). Without the trigger the idle polls are unchanged.
    pub async fn lingering(&mut self, deps: &Deps) -> bool {
        if !lingers(self.at, self.last_work, Instant::now()) || !deps.config.listen {
            return false;
        }
        self.trigger_installed(deps).await
    }

    /// Announces that the worker sleeps, for `ttl`, if it listens, the
    /// schema has the idle trigger and no announcement stands younger than
    /// half of `ttl`.
    pub async fn keep_alive(&mut self, deps: &Deps, ttl: Duration) -> Announced {
        if !deps.config.listen || !renewal_due(self.at, Instant::now(), ttl) {
            return Announced::No;
        }
        let first = self.at.is_none();
        if !self.trigger_installed(deps).await {
            return Announced::No;
        }
        self.retracted().await;
        if let Err(e) = deps.store.idle_announce(ttl).await {
            tracing::debug!(error = %e.with_causes(), "could not announce that the relay is idle; polling");
            return Announced::No;
        }
        self.at = Some(Instant::now());
        if first {
            Announced::First
        } else {
            Announced::Renewed
        }
    }

    /// After a first announcement: waits until every insert that read the
    /// trigger's time before it has committed. Such an insert took its
    /// transaction id before reading, so below an id taken now. A long
    /// writer elsewhere ends the wait early; the poll covers what it leaves.
    pub async fn settle(&self, deps: &Deps) {
        let xid = match deps.store.transaction_id_new().await {
            Ok(xid) => xid,
            Err(e) => {
                tracing::debug!(error = %e.with_causes(), "could not take a transaction id after announcing; polling");
                return;
            }
        };
        let started = Instant::now();
        while started.elapsed() < ANNOUNCE_SETTLE_MAX {
            match deps.store.transactions_ended_below(xid).await {
                Ok(true) => return,
                Ok(false) => tokio::time::sleep(ANNOUNCE_SETTLE_POLL).await,
                Err(e) => {
                    tracing::debug!(error = %e.with_causes(), "could not read the oldest running transaction; polling");
                    return;
                }
            }
        }
    }

    /// Whether the schema has the idle wake-up trigger (asked once; a
    /// schema switched to another mode is seen at the relay's restart).
    async fn trigger_installed(&mut self, deps: &Deps) -> bool {
        if self.trigger.is_none() {
            match deps.store.idle_trigger_installed().await {
                Ok(installed) => self.trigger = Some(installed),
                Err(e) => {
                    tracing::debug!(error = %e.with_causes(), "could not look for the wake-up trigger; polling");
                    return false;
                }
            }
        }
        self.trigger == Some(true)
    }
}

/// Whether an announcement is to be made now: none stands, or the standing
/// one is older than half its `ttl`.
fn renewal_due(at: Option<Instant>, now: Instant, ttl: Duration) -> bool {
    at.is_none_or(|at| now.duration_since(at) > ttl / 2)
}

/// Whether a worker that announced nothing yet and last published at
/// `last_work` still lingers at `now`.
fn lingers(at: Option<Instant>, last_work: Option<Instant>, now: Instant) -> bool {
    at.is_none() && last_work.is_some_and(|w| now.duration_since(w) < IDLE_LINGER)
}

impl Worker {
    /// Nothing deliverable: linger after work, else announce the sleep
    /// (only where the schema's idle trigger is installed, and a relay that
    /// does not LISTEN has nothing to be woken by), wait until every insert
    /// that could not see the announcement has committed, then look once
    /// more, so none of them is left for the poll. While asleep, keep the
    /// announcement alive, and wake for the poll or the earliest backoff.
    pub(super) async fn idle(&mut self, claim: Claimable) -> Phase {
        if self.announcement.lingering(&self.deps).await {
            self.wait(IDLE_LINGER_POLL).await;
            return Phase::Decide;
        }
        let ttl = Duration::from_millis(self.deps.config.lease_ms);
        if self.announcement.keep_alive(&self.deps, ttl).await == Announced::First {
            self.announcement.settle(&self.deps).await;
            return Phase::Claim(claim);
        }
        let poll = self.poll.next_delay();
        let next_retry = match self.deps.store.event_next_retry(&claim.partitions).await {
            Ok(next) => next,
            Err(e) => {
                tracing::debug!(error = %e.with_causes(), "could not read the next retry time; polling");
                None
            }
        };
        self.wait(idle_wait(poll, next_retry)).await;
        Phase::Decide
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TTL: Duration = Duration::from_secs(10);

    #[test]
    fn an_announcement_is_renewed_only_past_half_its_ttl() {
        let now = Instant::now();
        assert!(renewal_due(None, now, TTL), "none stands");
        assert!(!renewal_due(Some(now), now + TTL / 2, TTL));
        assert!(renewal_due(
            Some(now),
            now + TTL / 2 + Duration::from_millis(1),
            TTL
        ));
    }

    #[test]
    fn a_worker_lingers_just_after_work_and_never_once_it_announced() {
        let now = Instant::now();
        assert!(lingers(None, Some(now), now + IDLE_LINGER / 2));
        assert!(!lingers(None, Some(now), now + IDLE_LINGER), "linger over");
        assert!(!lingers(None, None, now), "no work yet");
        assert!(
            !lingers(Some(now), Some(now), now),
            "asleep already: announced"
        );
    }
}
