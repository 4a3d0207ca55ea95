//! The cases that go through PostgreSQL and a relay on a running broker:
//! order per aggregate, a large backlog, and a message the broker refuses.

use std::time::{Duration, Instant};

use serde_json::json;
use sqlx::PgPool;

use super::events::{enqueue, enqueue_interleaved, interleaved, new_event};
use super::relay::{dead_letters, migrated_scope, spawn_relay, wait_drained};
use super::verify::{check_delivered, read_back, Run};
use super::Harness;

/// How long a relay may take to settle the events of a case.
const SETTLED_WITHIN: Duration = Duration::from_secs(120);

/// 40 aggregates × 25 events, interleaved, through a relay with batches of
/// 100: every event on the broker, and for each aggregate the first
/// deliveries in enqueue order.
pub async fn keeps_aggregate_order<H: Harness>(h: &H, pool: &PgPool) {
    let run = Run::start(h, "keeps_aggregate_order");
    let scope = migrated_scope(h, pool, "order").await;
    let expected = enqueue_interleaved(pool, &scope, "agg", 40, 25).await;
    let relay = spawn_relay(h, pool, 100).await;
    let stats = run
        .drain_and_stop(relay, pool, "relay to deliver 1,000 events", SETTLED_WITHIN)
        .await;
    check_delivered(h, pool, &run, &scope, &expected, Duration::from_secs(60)).await;
    run.done(&format!("{} batches", stats.batches));
}

/// `n` events (250 aggregates) through a relay with batches of 500: all on
/// the broker, in order per aggregate. Reports the throughput.
pub async fn drains_a_large_batch<H: Harness>(h: &H, pool: &PgPool, n: usize) {
    let run = Run::start(h, "drains_a_large_batch");
    let name = &run.name;
    let scope = migrated_scope(h, pool, "large").await;
    let aggregates = 250.min(n.max(1));
    let expected =
        enqueue_interleaved(pool, &scope, "agg", aggregates, n.div_ceil(aggregates)).await;
    let relay_started = Instant::now();
    let relay = spawn_relay(h, pool, 500).await;
    wait_drained(
        pool,
        &format!("{name}: relay to deliver {n} events"),
        Duration::from_secs(300),
    )
    .await;
    let drained = relay_started.elapsed();
    relay.shutdown().await.expect("relay shutdown");
    check_delivered(h, pool, &run, &scope, &expected, Duration::from_secs(120)).await;
    run.done(&format!(
        "{} events drained in {drained:.2?} ({:.0} events/s)",
        expected.len(),
        expected.len() as f64 / drained.as_secs_f64()
    ));
}

/// An event above the broker's size limit is rejected at once: it is
/// dead-lettered after one attempt with an error, never reaches the
/// broker, and every other event (its own aggregate's next one included)
/// is delivered.
pub async fn rejects_an_oversized_message<H: Harness>(h: &H, pool: &PgPool) {
    let run = Run::start(h, "rejects_an_oversized_message");
    let (name, case) = (&run.name, run.case);
    let Some(bytes) = h.capabilities().oversized_payload_bytes else {
        eprintln!("conformance {name}: {case} not applicable (no size limit)");
        return;
    };
    let scope = migrated_scope(h, pool, "oversized").await;
    let mut events = interleaved(&scope, "agg", 10, 3);
    let blob = "x".repeat(bytes);
    let big = new_event(
        &scope,
        "big",
        0,
        Some(json!({"aggregate": "big", "n": 0, "blob": blob})),
    );
    let big_id = big.id;
    events.push(big);
    events.push(new_event(&scope, "big", 1, None));
    events.push(new_event(&scope, "agg0", 3, None));
    let mut expected = enqueue(pool, &events).await;
    expected.remove(&big_id);
    let relay = spawn_relay(h, pool, 100).await;
    let stats = run
        .drain_and_stop(relay, pool, "relay to settle every event", SETTLED_WITHIN)
        .await;
    let dead = dead_letters(pool).await;
    assert_eq!(
        dead.len(),
        1,
        "{name} / {case}: exactly the oversized event is dead-lettered: {dead:?}"
    );
    let (id, attempts, error) = &dead[0];
    assert_eq!(
        *id, big_id,
        "{name} / {case}: the dead letter is the oversized event"
    );
    assert_eq!(
        *attempts, 1,
        "{name} / {case}: rejected at the first attempt, not retried"
    );
    assert!(
        error.as_deref().is_some_and(|e| !e.is_empty()),
        "{name} / {case}: the dead letter keeps its error"
    );
    assert_eq!(
        stats.retried, 0,
        "{name} / {case}: a rejection is not a retry ({stats:?})"
    );
    read_back(h, &run, &scope, &expected, Duration::from_secs(60)).await;
    run.done(&format!("error: {}", error.as_deref().unwrap_or("")));
}
