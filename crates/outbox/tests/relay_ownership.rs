//! Partition ownership: instances share partitions, rebalance when one
//! joins or leaves, and a graceful stop hands partitions over at once.

mod common;

use std::time::Duration;

use common::{count, event, fast_config, start_relay, wait_for_count, LONG};
use outbox::{RelayConfig, Retention};
use outbox_testkit::{wait_until, TestPublisher};

async fn owners(pool: &sqlx::PgPool) -> Vec<(String, i64)> {
    common::rows(
        pool,
        "SELECT owner, count(*) FROM outbox_partitions
         WHERE owner IS NOT NULL AND lease_until > now() GROUP BY owner ORDER BY owner",
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn instances_split_partitions_and_take_them_back_on_a_graceful_stop() {
    let ctx = common::setup().await;
    let publisher = TestPublisher::new();
    // A long lease: only an explicit release can move partitions quickly.
    let slow_lease = |id: &str| RelayConfig {
        lease_ms: 30_000,
        ..fast_config(id)
    };
    let a = start_relay(&ctx, &publisher, slow_lease("a")).await;
    wait_until("a to hold all 32 partitions", LONG, || async {
        owners(&ctx.pool).await == vec![("a".to_owned(), 32)]
    })
    .await;
    let joined = std::time::Instant::now();
    let b = start_relay(&ctx, &publisher, slow_lease("b")).await;
    // b announces itself; a releases b's share between batches and says
    // so; b takes it at once (not at its next round, 10 s later).
    wait_until("a and b to hold 16 each", LONG, || async {
        owners(&ctx.pool).await == vec![("a".to_owned(), 16), ("b".to_owned(), 16)]
    })
    .await;
    assert!(
        joined.elapsed() < Duration::from_secs(8),
        "a join must not wait for lease rounds: {:?}",
        joined.elapsed()
    );
    let started = std::time::Instant::now();
    b.shutdown().await.unwrap();
    wait_until("a to take every partition back", LONG, || async {
        owners(&ctx.pool).await == vec![("a".to_owned(), 32)]
    })
    .await;
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "hand-over must not wait for the 30 s lease, nor for a's next round: {:?}",
        started.elapsed()
    );
    let live: i64 = count(&ctx.pool, "SELECT count(*) FROM outbox_relay_instances").await;
    assert_eq!(live, 1, "a stopped instance leaves the group");
    a.shutdown().await.unwrap();
    assert_eq!(
        count(
            &ctx.pool,
            "SELECT count(*) FROM outbox_partitions WHERE owner IS NOT NULL"
        )
        .await,
        0
    );
}

#[tokio::test]
async fn a_restart_under_the_same_name_resumes_at_once_with_a_new_epoch() {
    let ctx = common::setup().await;
    let publisher = TestPublisher::new();
    let config = RelayConfig {
        lease_ms: 60_000,
        ..fast_config("same")
    };
    let first = start_relay(&ctx, &publisher, config.clone()).await;
    wait_until("ownership", LONG, || async {
        first.held_partitions() == 32
    })
    .await;
    let epoch_before = count(&ctx.pool, "SELECT max(epoch) FROM outbox_partitions").await;
    first.abort();
    ctx.outbox.enqueue(&ctx.pool, &event("x", 1)).await.unwrap();
    let second = start_relay(&ctx, &publisher, config).await;
    wait_until(
        "delivery well within the 60 s lease",
        Duration::from_secs(20),
        || async { publisher.delivered_count() == 1 },
    )
    .await;
    let epoch_after = count(&ctx.pool, "SELECT min(epoch) FROM outbox_partitions").await;
    assert!(epoch_after > epoch_before, "{epoch_after} > {epoch_before}");
    second.shutdown().await.unwrap();
}

#[tokio::test]
async fn retention_mode_keeps_processed_rows_with_processed_at() {
    let ctx = common::setup().await;
    let publisher = TestPublisher::new();
    let events: Vec<_> = (1..=10).map(|n| event("k", n)).collect();
    ctx.outbox.enqueue_many(&ctx.pool, &events).await.unwrap();
    let relay = start_relay(
        &ctx,
        &publisher,
        RelayConfig {
            retention: Retention::Keep,
            ..fast_config("r1")
        },
    )
    .await;
    wait_until("delivery", LONG, || async {
        publisher.delivered_count() == 10
    })
    .await;
    // Acknowledged while running, not only by the final flush at shutdown.
    wait_for_count(
        &ctx.pool,
        "processed_at set on every row",
        "SELECT count(*) FROM outbox_events WHERE processed_at IS NOT NULL",
        10,
    )
    .await;
    relay.shutdown().await.unwrap();
    assert_eq!(
        count(
            &ctx.pool,
            "SELECT count(*) FROM outbox_events WHERE processed_at IS NOT NULL"
        )
        .await,
        10
    );
    // and they are not delivered again by a new relay
    let publisher2 = TestPublisher::new();
    let relay = start_relay(&ctx, &publisher2, fast_config("r2")).await;
    ctx.outbox
        .enqueue(&ctx.pool, &event("k", 11))
        .await
        .unwrap();
    ctx.outbox.wake();
    wait_until("the new event", LONG, || async {
        publisher2.delivered_count() == 1
    })
    .await;
    relay.shutdown().await.unwrap();
    assert_eq!(publisher2.delivered_count(), 1);
}
