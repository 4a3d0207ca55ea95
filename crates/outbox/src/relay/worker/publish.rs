//! Publishing one claimed batch: in per-aggregate waves, never from a
//! partition whose lease is lapsing, within the publish timeout; failures
//! are written (fenced) before the next claim.

use std::time::{Duration, Instant};

use super::ack::Published;
use super::Worker;
use crate::event::Event;
use crate::publisher::Outcome;
use crate::relay::outcomes::Settlement;
use crate::relay::ownership::Claimable;
use crate::relay::store::Claimed;
use crate::relay::waves::into_waves;

/// How long publishing may take before the connection kept for the next
/// claim goes back to the pool: the longest pace, so a broker that answers
/// as fast as the worker claims keeps it, and a slow one does not keep it
/// from the pool's other users.
const KEEP_WHILE_PUBLISHING: Duration = super::pace::PACE_MAX;

impl Worker {
    /// [`Worker::publish_batch`], giving the connection kept by the claim
    /// back to the pool once publishing has taken
    /// [`KEEP_WHILE_PUBLISHING`].
    pub(super) async fn publish_releasing(&self, batch: Claimed, claim: &Claimable) -> Published {
        let publishing = self.publish_batch(batch, claim);
        tokio::pin!(publishing);
        tokio::select! {
            published = &mut publishing => published,
            _ = tokio::time::sleep(KEEP_WHILE_PUBLISHING) => {
                self.deps.store.connection_release();
                publishing.await
            }
        }
    }

    /// Publishes `batch` and records its failures. The deliveries are
    /// acknowledged later, with the next claim.
    ///
    /// Rows that could not be decoded are never sent: each is dead-lettered
    /// with its reason, exactly like an event the broker rejected.
    pub(super) async fn publish_batch(&self, batch: Claimed, claim: &Claimable) -> Published {
        let started = Instant::now();
        let claimed = batch.events.len();
        let timeout = Duration::from_millis(self.deps.config.publish_timeout_ms);
        let policy = self.deps.config.retry_policy();
        let mut s = Settlement::default();

        for wave in into_waves(batch.events) {
            if s.outage.is_some() {
                break;
            }
            let wave = s.unblocked(wave);
            // Never publish from a partition whose lease is about to lapse:
            // its next owner may already be publishing.
            let valid = self.deps.ownership.still_valid();
            let (wave, lapsed): (Vec<Event>, Vec<Event>) = wave
                .into_iter()
                .partition(|e| valid.get(e.partition as usize) == Some(&true));
            for e in lapsed {
                s.hold(e);
            }
            let wave = if batch.undecodable.is_empty() {
                wave
            } else {
                let (bad, good): (Vec<Event>, Vec<Event>) = wave
                    .into_iter()
                    .partition(|e| batch.undecodable.contains_key(&e.id));
                let reasons = bad
                    .iter()
                    .map(|e| Outcome::Rejected(batch.undecodable[&e.id].clone()))
                    .collect();
                s.settle(bad, reasons, &policy);
                good
            };
            if wave.is_empty() {
                continue;
            }
            match self.send(&wave, timeout).await {
                Err(message) => s.transport_down(message),
                Ok(outcomes) => {
                    if outcomes.len() != wave.len() {
                        tracing::error!(
                            publisher = self.deps.publisher.name(),
                            events = wave.len(),
                            outcomes = outcomes.len(),
                            "publisher returned the wrong number of outcomes; missing ones are retried"
                        );
                    }
                    s.settle(wave, outcomes, &policy);
                }
            }
        }
        self.record_failures(&s, claim).await;
        Published {
            claimed,
            started,
            settlement: s,
            ctids: batch.ctids,
        }
    }

    /// Sends one wave within `timeout`; `Err` says why the transport is
    /// down for all of it. With a tracer, each traced event is sent inside
    /// its publish span, which ends with the event's outcome.
    async fn send(&self, wave: &[Event], timeout: Duration) -> Result<Vec<Outcome>, String> {
        #[cfg(feature = "opentelemetry")]
        if let Some(tracer) = &self.deps.tracer {
            let publisher = &self.deps.publisher;
            let (traced, spans) =
                tracer.start(publisher.name(), |e| publisher.destination(e), wave);
            let result = self.send_as_is(&traced, timeout).await;
            match &result {
                Ok(outcomes) => spans.end(outcomes),
                Err(message) => spans.end_unavailable(message),
            }
            return result;
        }
        self.send_as_is(wave, timeout).await
    }

    async fn send_as_is(&self, wave: &[Event], timeout: Duration) -> Result<Vec<Outcome>, String> {
        match tokio::time::timeout(timeout, self.deps.publisher.publish(wave)).await {
            Err(_) => Err(format!(
                "publish timed out after {} ms",
                timeout.as_millis()
            )),
            Ok(Err(e)) => Err(e.message),
            Ok(Ok(outcomes)) => Ok(outcomes),
        }
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
        for (e, error) in &s.dead {
            tracing::warn!(event_id = %e.id, event_type = %e.event_type, aggregate_id = %e.aggregate_id, %error, "event dead-lettered");
        }
    }
}
