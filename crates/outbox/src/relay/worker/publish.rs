//! Publishing a claimed batch: the publish phase, with the claim of the
//! next batch running ahead beside it; the batch itself through the
//! delivery core ([`crate::relay::deliver`]) in per-aggregate lanes, never
//! from a partition whose lease is lapsing; the batch claimed ahead joins
//! the lanes if it arrives while this one's last calls are in flight;
//! failures are written (fenced) before the next claim.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::ack::Published;
use super::ahead::{ClaimAhead, InFlight, Joined};
use super::pace::Pace;
use super::phase::Phase;
use super::Worker;
use crate::event::Event;
use crate::publisher::Outcome;
use crate::relay::deliver::outcomes::Settlement;
use crate::relay::deliver::Core;
use crate::relay::ownership::Claimable;
use crate::relay::store::Claimed;

impl Worker {
    /// Publishes `batch`. A full batch (a backlog) is published while, on
    /// its own task, the database acknowledges the previous batch and claims
    /// the next (excluding this one, still in flight), so the round trip and
    /// the decoding of the rows run in parallel with publishing. A short one
    /// means the worker has caught up: the claim ahead waits a pace first,
    /// and is made only if a call is still in flight by then (what
    /// committed meanwhile joins the lanes); otherwise nothing is claimed
    /// ahead, and the acknowledgement rides on the next claim.
    pub(super) async fn publish(&mut self, claim: Claimable, batch: Claimed) -> Phase {
        // While arrivals are sparse and producers wake the worker, it goes
        // on sleeping on the wake-up path after this batch (see `pace`):
        // the announcement stays, the idle poll keeps growing, and the
        // acknowledgement waits for the next wake-up. Otherwise it is busy:
        // producers stop notifying (where no other relay may be asleep on
        // the announcement; off the publish path) and the poll starts over.
        let caught_up = Pace::caught_up(batch.events.len(), self.deps.config.batch_size);
        let asleep = caught_up && !self.pace.dense() && self.idle_state.announcement.standing();
        if !asleep {
            self.idle_state.announcement.retract(&self.deps);
            self.idle_state.poll.reset();
        }
        let ahead = self.claim_ahead(&claim, &batch);
        let (published, joined, pending) = self.publish_releasing(batch, ahead, &claim).await;
        for j in joined {
            match j.claim {
                Ok((meta, events)) => {
                    self.claimed(&claim.partitions, j.start, j.started, meta, events)
                }
                Err(e) => tracing::debug!(error = %e, "prefetch failed; claiming afresh"),
            }
        }
        if let Some(ahead) = pending {
            self.claimed_ahead(ahead, &claim, &published).await;
        }
        // If no claim ahead acknowledged the previous batch (it failed, or
        // this batch followed a backlog's last one), do it now.
        self.acknowledge_or_give_up().await;
        let outage = published.settlement.outage.clone();
        self.unacked = Some(published);
        match outage {
            None if asleep => {
                self.outage.reset();
                Phase::Idle(claim)
            }
            None => {
                self.outage.reset();
                Phase::Decide
            }
            Some(error) => Phase::BrokerDown(error),
        }
    }

    /// Starts claiming the batch after `batch` (of `claim`): at once, or,
    /// when `batch` is short (the worker has caught up), a pace later.
    fn claim_ahead(&mut self, claim: &Claimable, batch: &Claimed) -> Option<ClaimAhead> {
        let batch_size = self.deps.config.batch_size;
        let after = Pace::caught_up(batch.events.len(), batch_size)
            .then(|| Duration::from_millis(self.deps.config.latency_budget_ms));
        let acked = self.unacked_refs();
        let mut exclude = acked.ids.clone();
        exclude.extend(batch.events.iter().map(|e| e.id));
        let start = self.cursor.start(&self.deps.store, &claim.partitions);
        Some(ClaimAhead::spawn(
            self.deps.store.clone(),
            claim.partitions.clone(),
            batch_size,
            (acked, exclude),
            start,
            after,
        ))
    }

    /// Takes in the batch claimed ahead while `published` was published. It
    /// was claimed before that one's outcome was known: it is only kept to
    /// be published next if every event of that one was delivered
    /// (otherwise a successor could overtake an event that is to be
    /// retried).
    async fn claimed_ahead(&mut self, ahead: ClaimAhead, claim: &Claimable, published: &Published) {
        let next = match ahead.task.await {
            // It waited, and the batch was done first: nothing claimed.
            Ok(Ok(None)) => return,
            Ok(Ok(Some(next))) => Ok(next),
            Ok(Err(e)) => Err(e.with_causes()),
            Err(panicked) => Err(format!("prefetch task failed: {panicked}")),
        };
        match next {
            Ok(next) => {
                self.claimed(
                    &claim.partitions,
                    ahead.start,
                    ahead.started,
                    next.meta,
                    next.events.len(),
                );
                if published.all_delivered() {
                    self.prefetched = Some(next);
                }
            }
            Err(e) => tracing::debug!(error = %e, "prefetch failed; claiming afresh"),
        }
    }

    /// [`Worker::publish_batch`], giving the connection kept by the claim
    /// back to the pool once publishing has taken the latency budget: a
    /// broker that answers as fast as the worker claims keeps it, and a
    /// slow one does not keep it from the pool's other users.
    async fn publish_releasing(
        &self,
        batch: Claimed,
        ahead: Option<ClaimAhead>,
        claim: &Claimable,
    ) -> (Published, Vec<Joined>, Option<ClaimAhead>) {
        let keep = Duration::from_millis(self.deps.config.latency_budget_ms);
        let publishing = self.publish_batch(batch, ahead, claim);
        tokio::pin!(publishing);
        tokio::select! {
            published = &mut publishing => published,
            _ = tokio::time::sleep(keep) => {
                self.deps.store.connection_release();
                publishing.await
            }
        }
    }

    /// Publishes `batch` and records its failures. The deliveries are
    /// acknowledged later, with the next claim. A batch claimed `ahead`
    /// that answers while calls are in flight and nothing is down joins the
    /// lanes, and is published with this one, as one (`ahead.rs`). Returns
    /// the batch published, the claims that joined it, and the claim still
    /// running when it was done.
    ///
    /// Rows that could not be decoded are never sent: each is dead-lettered
    /// with its reason, exactly like an event the broker rejected.
    async fn publish_batch(
        &self,
        mut batch: Claimed,
        ahead: Option<ClaimAhead>,
        claim: &Claimable,
    ) -> (Published, Vec<Joined>, Option<ClaimAhead>) {
        let started = Instant::now();
        let policy = self.deps.config.retry_policy();
        let mut s = Settlement::default();
        let state = Mutex::new(InFlight::new(
            &mut batch,
            ahead.as_ref(),
            self.deps.store.clone(),
            claim.partitions.clone(),
            self.deps.config.batch_size,
            Duration::from_millis(self.deps.config.latency_budget_ms),
        ));
        let ownership = &self.deps.ownership;
        // What is not sent stays a pending row, claimed again later.
        let (_not_sent, left) = self
            .core
            .deliver_joined(
                &mut s,
                batch.events,
                ahead.map(|a| a.task),
                |answer| state.lock().expect("batch in flight").join(answer),
                |s, group| {
                    // Never publish from a partition whose lease is about to
                    // lapse: its next owner may already be publishing.
                    let valid = ownership.still_valid();
                    let (group, lapsed): (Vec<Event>, Vec<Event>) = group
                        .into_iter()
                        .partition(|e| valid.get(e.partition as usize) == Some(&true));
                    for e in lapsed {
                        s.hold(e);
                    }
                    let st = state.lock().expect("batch in flight");
                    let undecodable = &st.undecodable;
                    if undecodable.is_empty() {
                        return group;
                    }
                    // Rows that could not be decoded are never sent: each is
                    // dead-lettered with its reason.
                    let (bad, good): (Vec<Event>, Vec<Event>) = group
                        .into_iter()
                        .partition(|e| undecodable.contains_key(&e.id));
                    let reasons = bad
                        .iter()
                        .map(|e| Outcome::Rejected(undecodable[&e.id].clone()))
                        .collect();
                    s.settle(bad, reasons, &policy);
                    good
                },
            )
            .await;
        self.record_failures(&s, claim).await;
        let st = state.into_inner().expect("batch in flight");
        let pending = st.pending(left);
        let published = Published {
            claimed: st.claimed,
            started,
            settlement: s,
            joined: st.joined_claims(),
            joined_ids: st.joined_ids,
            ctids: st.ctids,
        };
        (published, st.joined, pending)
    }

    /// Writes the batch's failures before the next claim, so that claim
    /// already skips the aggregates now in backoff. Fenced: a partition that
    /// changed owner meanwhile keeps its row as it was.
    async fn record_failures(&self, s: &Settlement, claim: &Claimable) {
        if s.failures.is_empty() {
            return;
        }
        match self
            .deps
            .store
            .event_mark_failed(&s.failures, self.deps.ownership.me(), &claim.epochs)
            .await
        {
            Ok(n) if (n as usize) < s.failures.len() => {
                let lost = s.failures.len() as u64 - n;
                tracing::warn!(lost, "failure updates fenced out: partitions changed owner");
                self.deps.stats.add_fenced_out(lost);
            }
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(error = %e.with_causes(), "could not record failures; the events will be retried")
            }
        }
        Core::log_dead_letters(s);
    }
}
