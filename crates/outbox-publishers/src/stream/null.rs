//! `--publisher null`: acknowledges everything at once and sends nothing.
//! For benchmarks (the relay's own cost) and dry runs.

use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};

use async_trait::async_trait;
use outbox::{Event, Outcome, Publisher, Unavailable};

use crate::cloudevents::{self, Format};
use crate::{Envelope, Template};

/// Reports every event delivered without sending it anywhere.
#[derive(Debug, Default)]
pub struct NullPublisher {
    delivered: AtomicU64,
    render: Option<Envelope>,
    destination: Option<Template>,
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
            destination: None,
        }
    }

    /// Also fills in `template` for each event (its topic override when
    /// set), as a templated broker publisher does before sending; an event
    /// missing a header the template names is rejected, as there.
    pub fn with_destination(mut self, template: Template) -> Self {
        self.destination = Some(template);
        self
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
        let mut outcomes = vec![Outcome::Delivered; batch.len()];
        if let Some(template) = &self.destination {
            for (event, outcome) in batch.iter().zip(&mut outcomes) {
                match template.destination(black_box(event)) {
                    Ok(destination) => {
                        black_box(&destination);
                    }
                    Err(missing) => *outcome = Outcome::Rejected(missing.to_string()),
                }
            }
        }
        if let Some(envelope) = &self.render {
            let mut buffer = Vec::with_capacity(1024);
            for event in batch {
                render(envelope, black_box(event), &mut buffer);
                black_box(&buffer);
            }
        }
        let delivered = outcomes
            .iter()
            .filter(|o| matches!(o, Outcome::Delivered))
            .count();
        self.delivered
            .fetch_add(delivered as u64, Ordering::Relaxed);
        Ok(outcomes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::event;

    #[tokio::test]
    async fn an_event_missing_a_templated_header_is_rejected_alone() {
        let template = Template::parse("destination", "orders.{header.tenant}").unwrap();
        let publisher = NullPublisher::default().with_destination(template);
        let batch = [
            event("a", &[("tenant", "acme")]),
            event("b", &[]),
            event("c", &[("tenant", "globex")]),
        ];
        let outcomes = publisher.publish(&batch).await.unwrap();
        assert_eq!(outcomes[0], Outcome::Delivered);
        assert!(
            matches!(&outcomes[1], Outcome::Rejected(why) if why.contains("tenant")),
            "{:?}",
            outcomes[1]
        );
        assert_eq!(outcomes[2], Outcome::Delivered);
        assert_eq!(publisher.delivered(), 2);
    }
}
