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

/// Publishes as many calls at once as the publisher lets the relay have
/// in flight ([`Publisher::concurrent_calls`], at most 8), each of as many
/// events as one call may carry ([`Publisher::events_per_call`], at most
/// 10), every event of its own aggregate: each call is answered with its
/// own events' outcomes, all delivered, and every message is on the
/// broker exactly once. A client that pipelines calls on one connection
/// must not hand one call's answers to another.
pub async fn calls_in_flight_at_once_each_settle_their_own_events<H: Harness>(h: &H) {
    let run = Run::start(h, "calls_in_flight_at_once_each_settle_their_own_events");
    let (name, case) = (&run.name, run.case);
    let scope = Scope::new("calls");
    h.prepare(&scope).await;
    let publisher = std::sync::Arc::new(h.publisher().await);
    let calls = publisher.concurrent_calls().clamp(1, 8);
    let per_call = publisher.events_per_call().clamp(1, 10);
    let batches: Vec<Vec<Event>> = (0..calls)
        .map(|c| {
            (0..per_call)
                .map(|k| event(&scope, &format!("call{c}-agg{k}"), 0))
                .collect()
        })
        .collect();
    let sent: Vec<_> = batches
        .iter()
        .cloned()
        .map(|batch| {
            let publisher = publisher.clone();
            tokio::spawn(async move { publisher.publish(&batch).await })
        })
        .collect();
    for (c, (call, batch)) in sent.into_iter().zip(&batches).enumerate() {
        let outcomes = call
            .await
            .unwrap_or_else(|e| panic!("{name} / {case}: call {c} panicked: {e}"))
            .unwrap_or_else(|e| panic!("{name} / {case}: call {c} failed: {e}"));
        assert_eq!(
            outcomes,
            vec![Outcome::Delivered; batch.len()],
            "{name} / {case}: call {c} of {calls} in flight: one outcome per event, all delivered"
        );
    }
    publisher.close().await;
    let total = calls * per_call;
    let received = h.consume(&scope, total, Duration::from_secs(30)).await;
    assert_eq!(
        received.len(),
        total,
        "{name} / {case}: {calls} calls of {per_call}: one message per event on the broker"
    );
    for e in batches.iter().flatten() {
        let r = message_of(&received, e.id, name, case);
        assert_eq!(
            r.payload,
            e.payload.as_bytes(),
            "{name} / {case}: event {} carries its own payload",
            e.id
        );
    }
    run.done(&format!(
        "{calls} calls of {per_call} events in flight at once"
    ));
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
