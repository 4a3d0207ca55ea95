//! The delivery core, one for both sources of events (DESIGN.md, "Two
//! delivery modes, one engine"): the table worker claims its batches and
//! acknowledges rows, the WAL reader streams its batches and confirms the
//! slot, and between "a batch in order" and "what became of each event"
//! both go through here.
//!
//! | concept | file |
//! |---------|------|
//! | one wave sent: the publish timeout, the spans | here ([`Core::send`]) |
//! | a batch as waves: no event overtakes its aggregate's earlier one | [`waves`] |
//! | outcomes into deliveries, retries, dead letters, an outage | [`outcomes`] |
//! | the pauses, as a source that does not claim rows reads them | [`pauses`] |

pub(crate) mod outcomes;
pub(crate) mod pauses;
pub(crate) mod waves;

use std::sync::Arc;
use std::time::Duration;

use crate::event::Event;
use crate::publisher::{Outcome, Publisher};
use crate::relay::config::RelayConfig;
use outcomes::{RetryPolicy, Settlement};

/// What publishes a wave and judges its outcomes.
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

    /// Sends one wave within the publish timeout; `Err` says why the
    /// transport is down for all of it. With a tracer, each traced event
    /// is sent inside its publish span, which ends with its outcome.
    pub(crate) async fn send(&self, wave: &[Event]) -> Result<Vec<Outcome>, String> {
        #[cfg(feature = "opentelemetry")]
        if let Some(tracer) = &self.tracer {
            let publisher = &self.publisher;
            let (traced, spans) =
                tracer.start(publisher.name(), |e| publisher.destination(e), wave);
            let result = self.send_as_is(&traced).await;
            match &result {
                Ok(outcomes) => spans.end(outcomes),
                Err(message) => spans.end_unavailable(message),
            }
            return result;
        }
        self.send_as_is(wave).await
    }

    async fn send_as_is(&self, wave: &[Event]) -> Result<Vec<Outcome>, String> {
        match tokio::time::timeout(self.timeout, self.publisher.publish(wave)).await {
            Err(_) => Err(format!(
                "publish timed out after {} ms",
                self.timeout.as_millis()
            )),
            Ok(Err(e)) => Err(e.message),
            Ok(Ok(outcomes)) => Ok(outcomes),
        }
    }

    /// Records the outcome of each event of `wave` in `s`, in order (a
    /// missing outcome counts as a retry, and is logged).
    pub(crate) fn settle(&self, s: &mut Settlement, wave: Vec<Event>, outcomes: Vec<Outcome>) {
        if outcomes.len() != wave.len() {
            tracing::error!(
                publisher = self.publisher.name(),
                events = wave.len(),
                outcomes = outcomes.len(),
                "publisher returned the wrong number of outcomes; missing ones are retried"
            );
        }
        s.settle(wave, outcomes, &self.policy);
    }

    /// Sends `wave` and records what became of it in `s`: its outcomes, or
    /// an outage for all of it.
    pub(crate) async fn publish(&self, s: &mut Settlement, wave: Vec<Event>) {
        match self.send(&wave).await {
            Err(message) => {
                s.transport_down(message);
                for e in &wave {
                    s.blocked.insert(e.aggregate_id.clone());
                }
                s.unsent.extend(wave);
            }
            Ok(outcomes) => self.settle(s, wave, outcomes),
        }
    }

    /// One dead-letter line per event dead-lettered in `s`.
    pub(crate) fn log_dead_letters(s: &Settlement) {
        for (e, error) in &s.dead {
            tracing::warn!(event_id = %e.id, event_type = %e.event_type, aggregate_id = %e.aggregate_id, %error, "event dead-lettered");
        }
    }
}
