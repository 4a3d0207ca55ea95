//! The lease round: renews this instance's partitions, takes its share of
//! free or expired ones, hands over what others are due, every third of a
//! lease or at once when another instance announces a change.

use std::sync::Arc;

use tokio::sync::watch;

use crate::relay::observe::{OutageKind, RelayObserver};
use crate::relay::ownership::Ownership;
use crate::relay::store::Store;
use crate::wakeup::Wakeup;

/// What the lease round needs.
pub(crate) struct LeaseLoop {
    pub store: Store,
    pub ownership: Arc<Ownership>,
    pub wakeup: Arc<Wakeup>,
    pub observer: Option<Arc<dyn RelayObserver>>,
    pub total: usize,
    pub channel: String,
    pub rebalance: Arc<tokio::sync::Notify>,
    /// The caller ran the first round itself (so its worker could claim at
    /// once): the loop begins with what follows a round.
    pub first_round_done: bool,
}

/// Runs lease rounds until shutdown.
pub(crate) async fn lease_loop(l: LeaseLoop, mut shutdown: watch::Receiver<bool>) {
    let period = l.ownership.lease() / 3;
    let mut announced = false;
    // Whether the last round failed on missing tables: said once per change.
    let mut missing = false;
    let mut first_round_done = l.first_round_done;
    while !*shutdown.borrow() {
        let before = l.ownership.held_count();
        let round = if std::mem::take(&mut first_round_done) {
            Ok(())
        } else {
            l.ownership.tick(&l.store).await
        };
        match round {
            Ok(()) => {
                if std::mem::take(&mut missing) {
                    tracing::info!("the outbox tables are back; taking partitions again");
                }
                let held = l.ownership.held_count();
                if held > before {
                    l.wakeup.wake_local();
                }
                if let Some(o) = &l.observer {
                    o.on_ownership(held, l.total);
                }
                if !announced {
                    // A newcomer asks the others to hand its share over now
                    // rather than at their next round.
                    match l.store.rebalance_notify(&l.channel).await {
                        Ok(()) => announced = true,
                        Err(e) => {
                            tracing::debug!(error = %e.with_causes(), "could not announce this instance yet; trying again next round")
                        }
                    }
                }
            }
            Err(e) => {
                let message = e.with_causes();
                if !e.is_missing_table() {
                    tracing::warn!(error = %message, "lease round failed; retrying");
                } else if !std::mem::replace(&mut missing, true) {
                    tracing::error!(error = %message, "the outbox tables are missing (schema dropped?): run `outbox migrate`; retrying until they are back");
                }
                if let Some(o) = &l.observer {
                    o.on_outage(OutageKind::Database, &message);
                    o.on_ownership(l.ownership.held_count(), l.total);
                }
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(period) => {}
            _ = l.rebalance.notified() => {}
            _ = shutdown.changed() => {}
        }
    }
}
