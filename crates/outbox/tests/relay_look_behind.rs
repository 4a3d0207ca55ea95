//! The claim cursor's look behind itself: a fresh pending row that appears
//! below the cursor (an acknowledgement lost in a PostgreSQL crash, a row
//! written by hand with an explicit seq) is still delivered, found by the
//! periodic look that runs beside the claims — claims themselves never
//! start over from the beginning for it.

mod common;

use std::time::{Duration, Instant};

use common::{count, execute, fast_config, start_relay, wait_for_count, EVENTS};
use outbox_testkit::{wait_until, TestPublisher};

/// Whether an event of `aggregate` has been delivered.
fn has_delivered(publisher: &TestPublisher, aggregate: &str) -> bool {
    publisher
        .deliveries()
        .iter()
        .any(|e| e.aggregate_id == aggregate)
}

#[tokio::test]
async fn a_pending_row_behind_the_cursor_is_found_by_the_look_behind() {
    let ctx = common::setup().await;
    let publisher = TestPublisher::new();
    let relay = start_relay(&ctx, &publisher, fast_config("r1")).await;

    // Move the cursor well past the first seqs: ten waves of rows,
    // delivered and deleted, each claim teaching the cursor a little more.
    for _ in 0..10 {
        execute(
            &ctx.pool,
            "INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload)
             SELECT 'order', (g % 20)::text, 'order.created', '{}' FROM generate_series(1, 20) g",
        )
        .await;
        wait_for_count(&ctx.pool, "the relay to drain", EVENTS, 0).await;
    }
    let lowest_delivered = publisher.deliveries().iter().map(|e| e.seq).min().unwrap();

    // A row with the lowest seq of all, pending, below the cursor.
    let behind = lowest_delivered;
    execute(
        &ctx.pool,
        &format!(
            "INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload, seq)
             OVERRIDING SYSTEM VALUE
             VALUES ('order', 'behind', 'order.created', '{{}}', {behind})"
        ),
    )
    .await;
    // Fresh rows after it keep flowing meanwhile: the claims read from the
    // cursor on, not from the beginning.
    execute(
        &ctx.pool,
        "INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload)
         VALUES ('order', 'ahead', 'order.created', '{}')",
    )
    .await;
    let inserted = Instant::now();
    wait_until(
        "the row ahead of the cursor to be delivered",
        Duration::from_secs(10),
        || async { has_delivered(&publisher, "ahead") },
    )
    .await;
    assert!(
        !has_delivered(&publisher, "behind"),
        "the row behind came first: the claims read from the beginning, not from the cursor"
    );

    // One look every 30 s (`RESCAN_EVERY`), started at the first claim
    // after the period: the row behind arrives within that and a margin.
    wait_until(
        "the row behind the cursor to be delivered",
        Duration::from_secs(45),
        || async { has_delivered(&publisher, "behind") },
    )
    .await;
    let waited = inserted.elapsed();
    relay.shutdown().await.unwrap();

    let found = publisher
        .deliveries()
        .into_iter()
        .find(|e| e.aggregate_id == "behind")
        .unwrap();
    assert_eq!(found.seq, behind, "the row behind keeps its seq");
    assert_eq!(count(&ctx.pool, EVENTS).await, 0, "nothing left pending");
    assert!(
        waited <= Duration::from_secs(45),
        "found after {waited:?}, beyond one look period and a margin"
    );
}
