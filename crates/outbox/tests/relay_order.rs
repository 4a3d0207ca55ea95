//! Ordered per aggregate: first deliveries follow enqueue order across
//! several relay instances, a crash and a join.

mod common;

use std::time::Duration;

use common::{event, fast_config, position, produce, start_relay, wait_for_count, EVENTS, LONG};
use outbox::NewEvent;
use outbox_testkit::{wait_until, Fail, Match, TestPublisher};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn order_holds_across_two_relays_a_crash_and_a_join() {
    let ctx = common::setup().await;
    let publisher = TestPublisher::new();
    // Slow the broker a little so batches are in flight when the crash hits.
    publisher.set_latency(Duration::from_millis(3));
    let a = start_relay(&ctx, &publisher, fast_config("relay-a")).await;
    let b = start_relay(&ctx, &publisher, fast_config("relay-b")).await;

    let (aggs, per_agg) = (200usize, 25i64);
    let producer = tokio::spawn(produce(
        ctx.pool.clone(),
        ctx.outbox.clone(),
        aggs,
        per_agg,
        4,
    ));
    wait_until(
        "both relays to share partitions and deliver",
        LONG,
        || async {
            a.held_partitions() > 0 && b.held_partitions() > 0 && publisher.delivered_count() > 500
        },
    )
    .await;
    let delivered_at_crash = publisher.delivered_count();
    a.abort(); // crash: no release, its leases must expire
    let c = start_relay(&ctx, &publisher, fast_config("relay-c")).await;
    producer.await.unwrap();
    assert!(
        (delivered_at_crash as i64) < (aggs as i64) * per_agg,
        "the crash must land mid-run"
    );

    let total = (aggs as i64) * per_agg;
    wait_for_count(&ctx.pool, "every event to be delivered", EVENTS, 0).await;
    b.shutdown().await.unwrap();
    c.shutdown().await.unwrap();

    let deliveries = publisher.deliveries();
    let distinct: std::collections::HashSet<_> = deliveries.iter().map(|e| e.id).collect();
    assert_eq!(distinct.len() as i64, total, "every event delivered");
    common::assert_first_deliveries_in_order(&deliveries);
    assert!(!publisher.saw_same_aggregate_in_batch());
}

#[tokio::test]
async fn a_retrying_event_holds_back_later_events_of_its_aggregate_only() {
    let ctx = common::setup().await;
    let publisher = TestPublisher::new();
    // The first event of aggregate "slow" fails three times, then passes.
    let first = event("slow", 1);
    publisher.fail(Match::Id(first.id), Fail::Retry, Some(3));
    let mut events: Vec<NewEvent> = vec![first];
    for n in 2..=5 {
        events.push(event("slow", n));
    }
    for n in 1..=50 {
        events.push(event(&format!("fast-{n}"), 1));
    }
    ctx.outbox.enqueue_many(&ctx.pool, &events).await.unwrap();
    let relay = start_relay(&ctx, &publisher, fast_config("r1")).await;
    wait_for_count(&ctx.pool, "all delivered", EVENTS, 0).await;
    relay.shutdown().await.unwrap();
    let deliveries = publisher.deliveries();
    let slow: Vec<i64> = deliveries
        .iter()
        .filter(|e| e.aggregate_id == "slow")
        .map(position)
        .collect();
    assert_eq!(slow, vec![1, 2, 3, 4, 5]);
    // Other aggregates were not held back: they were all delivered before
    // the slow aggregate's first event got through.
    let first_slow = deliveries
        .iter()
        .position(|e| e.aggregate_id == "slow")
        .unwrap();
    let fast_before = deliveries[..first_slow]
        .iter()
        .filter(|e| e.aggregate_id.starts_with("fast-"))
        .count();
    assert_eq!(fast_before, 50);
    let attempts = publisher
        .attempts()
        .iter()
        .filter(|a| a.id == events[0].id)
        .count();
    assert_eq!(attempts, 4);
}

#[tokio::test]
async fn failures_with_successors_in_the_next_batches_keep_order() {
    // Small batches, so an aggregate's events span many batches and the
    // batch claimed ahead (while one is being published) holds successors
    // of an event that is about to fail.
    let ctx = common::setup().await;
    let publisher = TestPublisher::new();
    let mut events = Vec::new();
    for n in 1..=20 {
        for agg in ["a", "b", "c", "d", "e"] {
            events.push(event(agg, n));
        }
    }
    let retry_a3 = events
        .iter()
        .find(|e| e.aggregate_id == "a" && e.payload["n"] == 3)
        .unwrap()
        .id;
    let retry_c7 = events
        .iter()
        .find(|e| e.aggregate_id == "c" && e.payload["n"] == 7)
        .unwrap()
        .id;
    publisher.fail(Match::Id(retry_a3), Fail::Retry, Some(2));
    publisher.fail(Match::Id(retry_c7), Fail::Retry, Some(1));
    ctx.outbox.enqueue_many(&ctx.pool, &events).await.unwrap();
    let relay = start_relay(
        &ctx,
        &publisher,
        outbox::RelayConfig {
            batch_size: 5,
            ..fast_config("r1")
        },
    )
    .await;
    wait_for_count(&ctx.pool, "all delivered", EVENTS, 0).await;
    relay.shutdown().await.unwrap();
    let deliveries = publisher.deliveries();
    common::assert_first_deliveries_in_order(&deliveries);
    let distinct: std::collections::HashSet<_> = deliveries.iter().map(|e| e.id).collect();
    assert_eq!(distinct.len(), 100);
}
