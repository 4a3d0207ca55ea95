//! A relay that keeps up with its producers waits out a pace between
//! claims (`relay/worker/pace.rs`, whose unit tests check the pace itself)
//! and still delivers every event once, in order: a batch published with no
//! claim running ahead of it, and its acknowledgement riding on a claim one
//! pace later, lose nothing and deliver nothing twice.

mod common;

use std::time::{Duration, Instant};

use common::{assert_first_deliveries_in_order, fast_config, produce, start_relay, wait_for_count};
use common::{EVENTS, LONG};
use outbox_testkit::{wait_until, TestPublisher};

/// The least time between two claims of a caught-up worker (`PACE_MIN`).
const PACE: Duration = Duration::from_millis(1);

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_paced_relay_delivers_every_event_once_in_order_and_never_claims_faster_than_its_pace() {
    let ctx = common::setup().await;
    let publisher = TestPublisher::new();
    let started = Instant::now();
    let relay = start_relay(&ctx, &publisher, fast_config("paced")).await;

    // One aggregate per producer: each wakes the relay after every commit,
    // which never cuts a pace short: claims stay at most one per
    // `PACE_MIN` however often they do.
    let (producers, per_producer) = (4usize, 600i64);
    produce(
        ctx.pool.clone(),
        ctx.outbox.clone(),
        producers,
        per_producer,
        producers,
    )
    .await;
    let produced_in = started.elapsed();
    wait_for_count(&ctx.pool, "every event delivered", EVENTS, 0).await;
    let total = (producers as i64 * per_producer) as u64;
    wait_until("every batch acknowledged", LONG, || async {
        relay.stats().delivered >= total
    })
    .await;
    let elapsed = started.elapsed();

    let stats = relay.stats();
    let bound = (elapsed.as_micros() / PACE.as_micros()) as u64 + 2;
    println!(
        "{total} events produced in {produced_in:?}, delivered in {elapsed:?}: {} batches (at most {bound}), {:.1} events per batch",
        stats.batches,
        total as f64 / stats.batches.max(1) as f64
    );
    assert!(
        stats.batches <= bound,
        "{} batches in {elapsed:?}: more than one claim per {PACE:?}",
        stats.batches
    );
    assert_eq!(stats.delivered, total, "each event delivered exactly once");
    assert_eq!(publisher.deliveries().len() as u64, total);
    assert_first_deliveries_in_order(&publisher.deliveries());
    relay.shutdown().await.unwrap();
}
