//! The delivery core, one for both sources of events (DESIGN.md, "Two
//! delivery modes, one engine"): the table worker claims its batches and
//! acknowledges rows, the WAL reader streams its batches and confirms the
//! slot, and between "a batch in order" and "what became of each event"
//! both go through here.
//!
//! | concept | file |
//! |---------|------|
//! | a batch in lanes: no event overtakes its aggregate's earlier one, none waits for another aggregate's | here ([`Core::deliver`]), [`lanes`] |
//! | one publish call: the publish timeout, the spans | here ([`Core::send`]) |
//! | outcomes into deliveries, retries, dead letters, an outage | [`outcomes`] |
//! | the pauses, as a source that does not claim rows reads them | [`pauses`] |

pub(crate) mod lanes;
pub(crate) mod outcomes;
pub(crate) mod pauses;

use std::sync::Arc;
use std::time::Duration;

use futures::stream::{FuturesUnordered, StreamExt};

use crate::event::Event;
use crate::publisher::{Outcome, Publisher};
use crate::relay::config::RelayConfig;
use lanes::Lanes;
use outcomes::{RetryPolicy, Settlement};

/// What publishes a batch and judges its outcomes.
#[derive(Clone)]
pub(crate) struct Core {
    publisher: Arc<dyn Publisher>,
    timeout: Duration,
    policy: RetryPolicy,
    #[cfg(feature = "opentelemetry")]
    tracer: Option<Arc<crate::trace::PublishTracer>>,
}

impl Core {
    pub(crate) fn new(
        publisher: Arc<dyn Publisher>,
        config: &RelayConfig,
        #[cfg(feature = "opentelemetry")] tracer: Option<Arc<crate::trace::PublishTracer>>,
    ) -> Self {
        Core {
            publisher,
            timeout: Duration::from_millis(config.publish_timeout_ms),
            policy: config.retry_policy(),
            #[cfg(feature = "opentelemetry")]
            tracer,
        }
    }

    /// Publishes `batch` (in `seq` order) in lanes ([`lanes`]): up to the
    /// publisher's [`Publisher::concurrent_calls`] calls in flight, an
    /// aggregate's next event sent as soon as its previous one is
    /// delivered, every outcome recorded in `s`, until the batch is done or
    /// the transport is down. `prepare` sees each group before it is sent
    /// and returns what may go; what it keeps back (recorded in `s` by it)
    /// stops its lane. Returns the events never sent, in `seq` order: those
    /// behind an event that was not delivered, and, after an outage, the
    /// rest.
    pub(crate) async fn deliver<F>(
        &self,
        s: &mut Settlement,
        batch: Vec<Event>,
        mut prepare: F,
    ) -> Vec<Event>
    where
        F: FnMut(&mut Settlement, Vec<Event>) -> Vec<Event>,
    {
        let calls = self.publisher.concurrent_calls().max(1);
        let per_call = if calls == 1 { usize::MAX } else { 1 };
        let mut lanes = Lanes::new(batch);
        let mut in_flight = FuturesUnordered::new();
        loop {
            while in_flight.len() < calls && s.outage.is_none() && lanes.any_ready() {
                let group = prepare(s, lanes.take(per_call));
                if group.is_empty() {
                    continue;
                }
                in_flight.push(async move {
                    let result = self.send(&group).await;
                    (group, result)
                });
            }
            let Some((group, result)) = in_flight.next().await else {
                break;
            };
            match result {
                Err(message) => self.not_sent(s, group, message),
                Ok(outcomes) => {
                    for (e, o) in group.iter().zip(&outcomes) {
                        if matches!(o, Outcome::Delivered) {
                            lanes.delivered(e);
                        }
                    }
                    self.settle(s, group, outcomes);
                }
            }
        }
        lanes.left_over()
    }

    /// Sends one group within the publish timeout; `Err` says why the
    /// transport is down for all of it. With a tracer, each traced event
    /// is sent inside its publish span, which ends with its outcome.
    pub(crate) async fn send(&self, group: &[Event]) -> Result<Vec<Outcome>, String> {
        #[cfg(feature = "opentelemetry")]
        if let Some(tracer) = &self.tracer {
            let publisher = &self.publisher;
            let (traced, spans) =
                tracer.start(publisher.name(), |e| publisher.destination(e), group);
            let result = self.send_as_is(&traced).await;
            match &result {
                Ok(outcomes) => spans.end(outcomes),
                Err(message) => spans.end_unavailable(message),
            }
            return result;
        }
        self.send_as_is(group).await
    }

    async fn send_as_is(&self, group: &[Event]) -> Result<Vec<Outcome>, String> {
        match tokio::time::timeout(self.timeout, self.publisher.publish(group)).await {
            Err(_) => Err(format!(
                "publish timed out after {} ms",
                self.timeout.as_millis()
            )),
            Ok(Err(e)) => Err(e.message),
            Ok(Ok(outcomes)) => Ok(outcomes),
        }
    }

    /// Records the outcome of each event of `group` in `s`, in order (a
    /// missing outcome counts as a retry, and is logged).
    pub(crate) fn settle(&self, s: &mut Settlement, group: Vec<Event>, outcomes: Vec<Outcome>) {
        if outcomes.len() != group.len() {
            tracing::error!(
                publisher = self.publisher.name(),
                events = group.len(),
                outcomes = outcomes.len(),
                "publisher returned the wrong number of outcomes; missing ones are retried"
            );
        }
        s.settle(group, outcomes, &self.policy);
    }

    /// The transport is down for `group`: an outage, and the group not
    /// sent (no attempt counted).
    fn not_sent(&self, s: &mut Settlement, group: Vec<Event>, message: String) {
        s.transport_down(message);
        for e in &group {
            s.blocked.insert(e.aggregate_id.clone());
        }
        s.unsent.extend(group);
    }

    /// One dead-letter line per event dead-lettered in `s`.
    pub(crate) fn log_dead_letters(s: &Settlement) {
        for (e, error) in &s.dead {
            tracing::warn!(event_id = %e.id, event_type = %e.event_type, aggregate_id = %e.aggregate_id, %error, "event dead-lettered");
        }
    }
}
