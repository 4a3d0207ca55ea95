//! `--publisher null`: acknowledges everything at once and sends nothing.
//! For benchmarks (the relay's own cost) and dry runs.

use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};

use async_trait::async_trait;
use outbox::{Event, Outcome, Publisher, Unavailable};

use crate::cloudevents::{self, Format};
use crate::Envelope;

/// Reports every event delivered without sending it anywhere.
#[derive(Debug, Default)]
pub struct NullPublisher {
    delivered: AtomicU64,
    render: Option<Envelope>,
}

impl NullPublisher {
    /// A null publisher that first builds each event's message in
    /// `envelope`'s format, the way a header-carrying broker publisher does
    /// (Kafka's header names), and then drops it: what a format costs the
    /// relay, without a broker's cost.
    pub fn rendering(envelope: Envelope) -> Self {
        NullPublisher {
            delivered: AtomicU64::new(0),
            render: Some(envelope),
        }
    }

    /// Events "delivered" so far.
    pub fn delivered(&self) -> u64 {
        self.delivered.load(Ordering::Relaxed)
    }
}

/// `event`'s message in `envelope`'s format: headers and body.
fn render(envelope: &Envelope, event: &Event) -> (Vec<(String, String)>, usize) {
    let binding = &cloudevents::KAFKA;
    let mut headers = Vec::with_capacity(11 + event.headers.len());
    match envelope.format() {
        Format::Plain => headers = event.message_headers(),
        Format::CloudEventsBinary => {
            envelope.binary_attributes(event, binding, |k, v| {
                headers.push((k.to_owned(), v.to_owned()))
            });
            headers.push(("content-type".into(), envelope.content_type().into()));
        }
        Format::CloudEventsStructured => {
            headers.push(("content-type".into(), envelope.content_type().into()));
        }
    }
    if !envelope.is_plain() {
        for (k, v) in &event.headers {
            if Envelope::forwards(binding, k) {
                headers.push((k.clone(), v.clone()));
            }
        }
    }
    let body = envelope.body(event);
    (headers, body.len())
}

#[async_trait]
impl Publisher for NullPublisher {
    fn name(&self) -> &str {
        "null"
    }

    async fn publish(&self, batch: &[Event]) -> Result<Vec<Outcome>, Unavailable> {
        if let Some(envelope) = &self.render {
            for event in batch {
                black_box(render(envelope, black_box(event)));
            }
        }
        self.delivered
            .fetch_add(batch.len() as u64, Ordering::Relaxed);
        Ok(vec![Outcome::Delivered; batch.len()])
    }
}
