//! The cases that need only the publisher and its broker: a batch
//! published directly, read back from the broker.

use std::time::Duration;

use outbox::{Event, Outcome, Publisher};
use uuid::Uuid;

use super::events::event;
use super::received::Received;
use super::scope::Scope;
use super::verify::Run;
use super::Harness;

/// Publishes 20 events of 20 aggregates in one call: every outcome must be
/// [`Outcome::Delivered`], and exactly those 20 messages, byte for byte,
/// must be on the broker.
pub async fn delivers_a_batch<H: Harness>(h: &H) {
    let run = Run::start(h, "delivers_a_batch");
    let (name, case) = (&run.name, run.case);
    let scope = Scope::new("batch");
    h.prepare(&scope).await;
    let batch: Vec<Event> = (0..20)
        .map(|a| event(&scope, &format!("agg{a}"), 0))
        .collect();
    let (publisher, outcomes) = publish_directly(h, name, case, &batch).await;
    assert_eq!(
        outcomes,
        vec![Outcome::Delivered; batch.len()],
        "{name} / {case}: one outcome per event, all delivered"
    );
    publisher.close().await;
    let received = h
        .consume(&scope, batch.len(), Duration::from_secs(30))
        .await;
    assert_eq!(
        received.len(),
        batch.len(),
        "{name} / {case}: one message per event on the broker, no more, no less"
    );
    for e in &batch {
        let r = message_of(&received, e.id, name, case);
        assert_eq!(
            r.payload,
            e.payload.as_bytes(),
            "{name} / {case}: the message body must be the payload's JSON bytes"
        );
    }
    run.done("");
}

/// Checks the message mapping: the four `outbox-*` headers, the producer's
/// headers (`traceparent`, a custom one), the key (= aggregate id) where
/// the broker has keys, the default destination and the topic override.
pub async fn maps_headers_key_and_destination<H: Harness>(h: &H) {
    let run = Run::start(h, "maps_headers_key_and_destination");
    let (name, case) = (&run.name, run.case);
    let scope = Scope::new("headers");
    h.prepare(&scope).await;
    let mut plain = event(&scope, "order-42", 0);
    plain.headers.insert(
        "traceparent".into(),
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".into(),
    );
    plain.headers.insert("x-tenant".into(), "acme".into());
    let mut routed = event(&scope, "order-43", 0);
    routed.topic = Some(scope.override_destination());
    routed.headers.insert("x-tenant".into(), "globex".into());
    let batch = vec![plain, routed];
    let (publisher, outcomes) = publish_directly(h, name, case, &batch).await;
    assert_eq!(outcomes, vec![Outcome::Delivered; 2], "{name} / {case}");
    publisher.close().await;
    let received = h.consume(&scope, 2, Duration::from_secs(30)).await;
    assert_eq!(
        received.len(),
        2,
        "{name} / {case}: both messages on the broker"
    );
    for e in &batch {
        let r = message_of(&received, e.id, name, case);
        for (k, v) in e.message_headers() {
            assert_eq!(
                r.headers.get(&k),
                Some(&v),
                "{name} / {case}: header {k} of event {} (got {:?})",
                e.id,
                r.headers
            );
        }
        if h.capabilities().keyed {
            assert_eq!(
                r.key.as_deref(),
                Some(e.aggregate_id.as_str()),
                "{name} / {case}: the key is the aggregate id"
            );
        }
        let want = match &e.topic {
            Some(t) => t.clone(),
            None => h.default_destination(&scope),
        };
        assert_eq!(
            r.destination, want,
            "{name} / {case}: destination of event {}",
            e.id
        );
    }
    run.done("");
}

/// Publishes `batch` with a new publisher of the harness (a publish error
/// fails the case); returns the publisher, still open, and the outcomes.
async fn publish_directly<H: Harness>(
    h: &H,
    name: &str,
    case: &str,
    batch: &[Event],
) -> (H::Publisher, Vec<Outcome>) {
    let publisher = h.publisher().await;
    let outcomes = publisher
        .publish(batch)
        .await
        .unwrap_or_else(|e| panic!("{name} / {case}: publish failed: {e}"));
    (publisher, outcomes)
}

/// The message read back for event `id` (its absence fails the case).
fn message_of<'a>(received: &'a [Received], id: Uuid, name: &str, case: &str) -> &'a Received {
    received
        .iter()
        .find(|r| r.event_id() == Some(id))
        .unwrap_or_else(|| panic!("{name} / {case}: event {id} is not on the broker"))
}
