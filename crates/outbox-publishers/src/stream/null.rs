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

/// Writes `event`'s message in `envelope`'s format into `out` the way a
/// client library serialises a record: each header's name and value, then
/// the body, copied into one buffer. The headers come from where the
/// publishers take them (`Event::message_headers` for plain, the envelope's
/// attributes for CloudEvents), so each format pays what it pays there.
fn render(envelope: &Envelope, event: &Event, out: &mut Vec<u8>) {
    let binding = &cloudevents::KAFKA;
    out.clear();
    let mut put = |name: &str, value: &str| {
        out.extend_from_slice(name.as_bytes());
        out.push(0);
        out.extend_from_slice(value.as_bytes());
        out.push(0);
    };
    match envelope.format() {
        Format::Plain => {
            for (name, value) in event.message_headers() {
                put(&name, &value);
            }
        }
        Format::CloudEventsBinary => {
            envelope.binary_attributes(event, binding, &mut put);
            put("content-type", envelope.content_type());
        }
        Format::CloudEventsStructured => put("content-type", envelope.content_type()),
    }
    if !envelope.is_plain() {
        for (name, value) in &event.headers {
            if Envelope::forwards(binding, name) {
                put(name, value);
            }
        }
    }
    out.extend_from_slice(&envelope.body(event));
}

#[async_trait]
impl Publisher for NullPublisher {
    fn name(&self) -> &str {
        "null"
    }

    async fn publish(&self, batch: &[Event]) -> Result<Vec<Outcome>, Unavailable> {
        if let Some(envelope) = &self.render {
            let mut buffer = Vec::with_capacity(1024);
            for event in batch {
                render(envelope, black_box(event), &mut buffer);
                black_box(&buffer);
            }
        }
        self.delivered
            .fetch_add(batch.len() as u64, Ordering::Relaxed);
        Ok(vec![Outcome::Delivered; batch.len()])
    }
}
