//! The events a case publishes: built for publishing directly, or enqueued
//! in the outbox for a relay (with what each should look like on the
//! broker).

use std::collections::{BTreeMap, HashMap};

use outbox::{Event, NewEvent, Outbox};
use serde_json::json;
use sqlx::PgPool;
use uuid::Uuid;

use super::scope::Scope;
use super::verify::Expected;

/// An event of `scope` for publishing directly (not through a relay): the
/// `n`-th of aggregate `aggregate_id`, with payload
/// `{"aggregate": aggregate_id, "n": n}`.
pub fn event(scope: &Scope, aggregate_id: &str, n: i64) -> Event {
    Event {
        id: Uuid::now_v7(),
        seq: n,
        aggregate_type: scope.aggregate_type().to_owned(),
        aggregate_id: aggregate_id.to_owned(),
        event_type: scope.event_type(),
        payload: json!({"aggregate": aggregate_id, "n": n}).to_string(),
        headers: BTreeMap::new(),
        topic: None,
        attempts: 0,
        created_at: chrono_now(),
        partition: 0,
    }
}

fn chrono_now() -> chrono::DateTime<chrono::Utc> {
    chrono::Utc::now()
}

/// `per_aggregate` events for each of `aggregates` aggregates named
/// `<prefix><a>`, interleaved (a0/0, a1/0, …, a0/1, …).
pub(super) fn interleaved(
    scope: &Scope,
    prefix: &str,
    aggregates: usize,
    per_aggregate: usize,
) -> Vec<NewEvent> {
    let mut all = Vec::with_capacity(aggregates * per_aggregate);
    for n in 0..per_aggregate {
        for a in 0..aggregates {
            let agg = format!("{prefix}{a}");
            all.push(new_event(scope, &agg, n as i64, None));
        }
    }
    all
}

/// Enqueues `per_aggregate` events for each of `aggregates` aggregates,
/// interleaved (a0/0, a1/0, …, a0/1, …), in statements of at most 1,000.
pub(super) async fn enqueue_interleaved(
    pool: &PgPool,
    scope: &Scope,
    prefix: &str,
    aggregates: usize,
    per_aggregate: usize,
) -> HashMap<Uuid, Expected> {
    enqueue(pool, &interleaved(scope, prefix, aggregates, per_aggregate)).await
}

/// An event of `scope` to enqueue: the `n`-th of `aggregate`, with
/// `payload` (by default `{"aggregate": aggregate, "n": n}`) and a
/// `traceparent` header.
pub(super) fn new_event(
    scope: &Scope,
    aggregate: &str,
    n: i64,
    payload: Option<serde_json::Value>,
) -> NewEvent {
    let payload = payload.unwrap_or_else(|| json!({"aggregate": aggregate, "n": n}));
    NewEvent::json(
        scope.aggregate_type(),
        aggregate,
        scope.event_type(),
        payload,
    )
    .header(
        "traceparent",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
    )
}

/// Enqueues `events`, in statements of at most 1,000; returns what each
/// should look like on the broker, by id.
pub(super) async fn enqueue(pool: &PgPool, events: &[NewEvent]) -> HashMap<Uuid, Expected> {
    let outbox = Outbox::new();
    for chunk in events.chunks(1_000) {
        outbox
            .enqueue_many(pool, chunk)
            .await
            .expect("enqueueing test events");
    }
    events
        .iter()
        .map(|e| {
            (
                e.id,
                Expected {
                    aggregate: e.aggregate_id.clone(),
                    n: e.payload
                        .get("n")
                        .and_then(serde_json::Value::as_i64)
                        .unwrap_or(-1),
                    payload: e.payload.clone(),
                },
            )
        })
        .collect()
}
