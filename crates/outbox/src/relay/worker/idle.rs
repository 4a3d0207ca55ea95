//! The idle announcement: how a worker tells producers' wake-up trigger
//! (migration 7) that it sleeps, closes the race with inserts that could
//! not see the announcement yet, and withdraws it when it has work; and the
//! idle phase that uses it.

use std::time::{Duration, Instant};

use tokio::task::JoinHandle;

use super::phase::{idle_wait, Phase};
use super::{Deps, Worker};
use crate::relay::backoff::DoublingDelay;
use crate::relay::ownership::Claimable;

/// How long a batch published while arrivals are sparse may wait for its
/// acknowledgement. It rides on the next claim, which the next event's
/// wake-up starts; only when none comes within this is a claim made for
/// the acknowledgement alone. Until then the rows stay claimed: a relay
/// that dies meanwhile delivers them again (at least once), and `status`
/// counts them as pending.
pub(super) const ACK_DEFER: Duration = Duration::from_millis(50);
/// Idle waits at most this long skip looking up the earliest backoff's end
/// (one statement): the poll after them comes soon enough.
const RETRY_LOOKUP_FROM: Duration = Duration::from_millis(50);

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
/// A worker's state while claims find nothing.
pub(super) struct IdleState {
    /// Idle polling: from `poll_min_ms`, doubling to `poll_max_ms`.
    pub poll: DoublingDelay,
    /// Whether producers' wake-up trigger was told that this worker sleeps.
    pub announcement: Announcement,
    /// Since when claims have found nothing (`None` while they find work).
    pub since: Option<Instant>,
}

impl IdleState {
    pub fn new(poll: DoublingDelay) -> Self {
        IdleState {
            poll,
            announcement: Announcement::default(),
            since: None,
        }
    }
}

#[derive(Debug, Default)]
pub(super) struct Announcement {
    /// When this instance last announced that it sleeps (producers' wake-up
    /// trigger then notifies); `None` while it has work.
    at: Option<Instant>,
    /// A withdrawal still running off the publish path; the next
    /// announcement waits for it, so they cannot cross.
    retracting: Option<JoinHandle<()>>,
    /// Whether the schema has the idle wake-up trigger (`None`: not known
    /// yet).
    trigger: Option<bool>,
}

impl Announcement {
    /// Whether producers are being told to wake this worker.
    pub fn standing(&self) -> bool {
        self.at.is_some()
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

impl Worker {
    /// Nothing deliverable. While arrivals are dense, claim again one pace
    /// later. Otherwise announce the sleep (only where the schema's idle
    /// trigger is installed, and a relay that does not LISTEN has nothing
    /// to be woken by), wait until every insert that could not see the
    /// announcement has committed, then look once more, so none of them is
    /// left for the poll. While asleep, keep the announcement alive, and
    /// wake for a producer's commit, the poll, the earliest backoff's end,
    /// or the acknowledgement of a batch still awaiting it.
    pub(super) async fn idle(&mut self, claim: Claimable) -> Phase {
        if self.pace.dense() {
            return Phase::Claim(claim);
        }
        let idle_since = *self.idle_state.since.get_or_insert_with(Instant::now);
        let ttl = Duration::from_millis(self.deps.config.lease_ms);
        if self
            .idle_state
            .announcement
            .keep_alive(&self.deps, ttl)
            .await
            == Announced::First
        {
            self.idle_state.announcement.settle(&self.deps).await;
            return Phase::Claim(claim);
        }
        if super::dormant::dormant_due(
            self.deps.dormant_after,
            idle_since.elapsed(),
            self.unacked.is_some(),
            self.idle_state.announcement.standing(),
        ) {
            return Phase::Dormant(claim);
        }
        let mut wait = self.idle_state.poll.next_delay();
        if self.unacked.is_some() {
            wait = wait.min(ACK_DEFER);
        }
        if wait > RETRY_LOOKUP_FROM {
            match self.deps.store.event_next_retry(&claim.partitions).await {
                Ok(next_retry) => wait = idle_wait(wait, next_retry),
                Err(e) => {
                    tracing::debug!(error = %e.with_causes(), "could not read the next retry time; polling");
                }
            }
        }
        self.wait(wait).await;
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
}
