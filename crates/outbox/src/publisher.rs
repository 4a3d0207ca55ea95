//! The seam between the relay and a broker.

use async_trait::async_trait;

use crate::event::Event;

/// What happened to one event of a batch.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Outcome {
    /// The broker acknowledged the event; the relay marks it done.
    Delivered,
    /// A failure that may pass (timeout, broker asked to back off): the
    /// relay counts an attempt and retries after a backoff.
    Retry(String),
    /// Like [`Outcome::Retry`], with the broker's own hint of how long to
    /// wait (an HTTP `Retry-After`): the next attempt comes no earlier than
    /// the hint and no earlier than the relay's backoff, but never later
    /// than the relay's `backoff_max_ms` (a hint above it is cut to it).
    RetryAfter(String, std::time::Duration),
    /// The broker will never take this event (too large, invalid
    /// destination): the relay dead-letters it at once with this error.
    Rejected(String),
    /// The transport failed before this event was acknowledged, while
    /// others of the batch got through (a connection lost mid-batch). Like
    /// [`Unavailable`] for the whole batch, it counts no attempt: the relay
    /// backs off and sends the event again.
    Unavailable(String),
}

/// The whole transport is down (broker unreachable, connection lost). The
/// relay burns no attempts for it: it backs off and tries the batch again.
#[derive(Debug, Clone, thiserror::Error)]
#[error("publisher unavailable: {message}")]
pub struct Unavailable {
    /// What failed, for logs and `/readyz`. Never contains credentials.
    pub message: String,
}

impl Unavailable {
    /// Builds the error.
    pub fn new(message: impl Into<String>) -> Self {
        Unavailable {
            message: message.into(),
        }
    }
}

/// A broker the relay publishes to.
///
/// The relay calls [`Publisher::publish`] with a batch in which **no two
/// events share an `aggregate_id`**, so a publisher may send a batch's events
/// concurrently; it must return one [`Outcome`] per event, in batch order,
/// and report [`Outcome::Delivered`] only after the broker acknowledged the
/// event durably. Classification belongs to the publisher; backoff belongs to
/// the relay.
#[async_trait]
pub trait Publisher: Send + Sync + 'static {
    /// A short name for logs and metrics, e.g. `kafka`.
    fn name(&self) -> &str;

    /// Publishes a batch; `Err` means the transport is down for all of it.
    async fn publish(&self, batch: &[Event]) -> Result<Vec<Outcome>, Unavailable>;

    /// Where `event` goes (topic, subject, queue…), for the publish span's
    /// `messaging.destination.name`. `None` (the default) leaves the
    /// attribute out.
    fn destination(&self, event: &Event) -> Option<String> {
        let _ = event;
        None
    }

    /// How many [`Publisher::publish`] calls the relay may have in flight
    /// at once. 1 (the default): each call gets every event that is ready
    /// (one per aggregate), at most `batch_size` of them, for a broker that
    /// batches them itself. More:
    /// each call gets one event, and the next event of an aggregate goes
    /// as soon as its previous one is acknowledged, without waiting for
    /// the others in flight (a webhook, one request per event). Never two
    /// events of one aggregate in flight either way.
    fn concurrent_calls(&self) -> usize {
        1
    }

    /// The most events one [`Publisher::publish`] call gets (never more
    /// than `batch_size`). By default one when several calls may be in
    /// flight, every ready event otherwise. A broker client that batches
    /// and pipelines itself (Kafka's producer queue) takes several calls
    /// of many events each: a batch that joins while a call is in flight
    /// goes out in the next call without waiting for the first one's
    /// acknowledgements.
    fn events_per_call(&self) -> usize {
        if self.concurrent_calls() > 1 {
            1
        } else {
            usize::MAX
        }
    }

    /// Checks that the broker is reachable (used by readiness checks).
    async fn health(&self) -> Result<(), Unavailable> {
        Ok(())
    }

    /// Flushes and releases resources; called once when the relay stops.
    async fn close(&self) {}
}

#[async_trait]
impl<P: Publisher + ?Sized> Publisher for std::sync::Arc<P> {
    fn name(&self) -> &str {
        (**self).name()
    }
    async fn publish(&self, batch: &[Event]) -> Result<Vec<Outcome>, Unavailable> {
        (**self).publish(batch).await
    }
    fn destination(&self, event: &Event) -> Option<String> {
        (**self).destination(event)
    }
    fn concurrent_calls(&self) -> usize {
        (**self).concurrent_calls()
    }
    fn events_per_call(&self) -> usize {
        (**self).events_per_call()
    }
    async fn health(&self) -> Result<(), Unavailable> {
        (**self).health().await
    }
    async fn close(&self) {
        (**self).close().await
    }
}
