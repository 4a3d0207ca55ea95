//! A broker outage is not a per-event failure: it burns no attempts and
//! dead-letters nothing; delivery resumes when the broker returns.

mod common;

use common::{count, event, fast_config, start_relay, wait_for_count, EVENTS, LONG};
use outbox::RelayConfig;
use outbox_testkit::{wait_until, TestPublisher};

#[tokio::test]
async fn an_outage_burns_no_attempts_and_delivery_resumes() {
    let ctx = common::setup().await;
    let publisher = TestPublisher::new();
    publisher.set_down(true);
    let events: Vec<_> = (1..=300)
        .map(|n| event(&format!("a{}", n % 30), n))
        .collect();
    ctx.outbox.enqueue_many(&ctx.pool, &events).await.unwrap();
    let config = RelayConfig {
        max_attempts: 2,
        ..fast_config("r1")
    };
    let relay = start_relay(&ctx, &publisher, config).await;
    // Far more failed calls than max_attempts: none may count.
    wait_until("many failed publish calls", LONG, || async {
        publisher.unavailable_calls() >= 10
    })
    .await;
    assert_eq!(
        count(
            &ctx.pool,
            "SELECT count(*) FROM outbox_events WHERE attempts > 0"
        )
        .await,
        0
    );
    assert_eq!(
        count(&ctx.pool, "SELECT count(*) FROM outbox_dead_letters").await,
        0
    );
    assert_eq!(publisher.delivered_count(), 0);

    publisher.set_down(false);
    wait_for_count(&ctx.pool, "delivery to resume", EVENTS, 0).await;
    let stats = relay.shutdown().await.unwrap();
    assert_eq!(stats.dead_lettered, 0);
    assert_eq!(stats.retried, 0);
    assert!(stats.outages >= 10);
    let distinct: std::collections::HashSet<_> =
        publisher.deliveries().iter().map(|e| e.id).collect();
    assert_eq!(distinct.len(), 300);
}

#[tokio::test]
async fn a_transport_failure_mid_batch_keeps_deliveries_and_burns_no_attempts() {
    use outbox_testkit::{Fail, Match};
    let ctx = common::setup().await;
    let publisher = TestPublisher::new();
    // The connection "drops" for aggregate a3's events, five times, while
    // the rest of each batch gets through.
    publisher.fail(Match::Aggregate("a3".into()), Fail::Unavailable, Some(5));
    let mut events = Vec::new();
    for n in 1..=3 {
        for a in 0..10 {
            events.push(event(&format!("a{a}"), n));
        }
    }
    ctx.outbox.enqueue_many(&ctx.pool, &events).await.unwrap();
    let config = RelayConfig {
        max_attempts: 2,
        retention: outbox::Retention::Keep,
        ..fast_config("r1")
    };
    let relay = start_relay(&ctx, &publisher, config).await;
    wait_for_count(
        &ctx.pool,
        "everything processed",
        "SELECT count(*) FROM outbox_events WHERE processed_at IS NULL",
        0,
    )
    .await;
    let stats = relay.shutdown().await.unwrap();
    assert_eq!(
        count(&ctx.pool, "SELECT max(attempts)::int8 FROM outbox_events").await,
        0,
        "a transport failure is not an attempt"
    );
    assert_eq!(stats.dead_lettered, 0);
    assert!(stats.outages >= 1);
    let a3_failures = publisher
        .attempts()
        .iter()
        .filter(|a| a.aggregate_id == "a3" && a.outcome != outbox::Outcome::Delivered)
        .count();
    assert_eq!(a3_failures, 5);
    let deliveries = publisher.deliveries();
    common::assert_first_deliveries_in_order(&deliveries);
    let distinct: std::collections::HashSet<_> = deliveries.iter().map(|e| e.id).collect();
    assert_eq!(distinct.len(), 30);
}
