//! Claiming a batch: the claim phase, and what every claim's answer
//! teaches the worker (the claim ahead in `publish` too).

use std::time::Instant;

use super::phase::Phase;
use super::Worker;
use crate::relay::cursor::{ClaimMeta, Start};
use crate::relay::ownership::Claimable;

impl Worker {
    /// Waits for the pace, then acknowledges the batch awaiting it and
    /// claims the next in one statement: published if it has events, idle
    /// if not.
    pub(super) async fn claim(&mut self, claim: Claimable) -> Phase {
        let pace = self.pace.wait(Instant::now());
        if !pace.is_zero() {
            self.sleep(pace).await;
            if *self.deps.shutdown.borrow() {
                return Phase::Decide;
            }
        }
        let started = Instant::now();
        self.woken = self.deps.wakeup.generation();
        let acked = self.unacked_refs();
        let start = self.cursor.start(&self.deps.store, &claim.partitions);
        let claimed = self
            .deps
            .store
            .event_ack_and_claim(
                &claim.partitions,
                self.deps.config.batch_size,
                &acked,
                &acked.ids,
                start,
            )
            .await;
        match claimed {
            Ok(batch) => {
                self.claimed(
                    &claim.partitions,
                    start,
                    started,
                    batch.meta,
                    batch.events.len(),
                );
                if batch.events.is_empty() {
                    Phase::Idle(claim)
                } else {
                    Phase::Publish(claim, batch)
                }
            }
            Err(e) => Phase::DatabaseDown(e),
        }
    }

    /// Takes in a claim of `events` rows from `partitions` at `start`,
    /// begun at `started`, which saw `meta`: the cursor learns what the
    /// claim saw, the batch its statement acknowledged is counted, the pace
    /// learns the rate.
    pub(super) fn claimed(
        &mut self,
        partitions: &[i32],
        start: Start,
        started: Instant,
        meta: Option<ClaimMeta>,
        events: usize,
    ) {
        self.cursor.observe(partitions, start, meta);
        if events > 0 {
            self.idle_state.since = None;
        }
        self.unacked_acknowledged();
        self.pace
            .observe(started, events, self.deps.config.batch_size);
    }
}
