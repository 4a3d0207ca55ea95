//! Poison is contained: retried with growing delays, dead-lettered with its
//! error, never blocking other aggregates.

mod common;

use common::{count, event, fast_config, position, start_relay, wait_for_count, LONG, NOT_DEAD};
use outbox::RelayConfig;
use outbox_testkit::{wait_until, Fail, Match, TestPublisher};

#[tokio::test]
async fn a_failing_event_backs_off_then_is_dead_lettered_with_its_error() {
    let ctx = common::setup().await;
    let publisher = TestPublisher::new();
    publisher.fail(Match::Aggregate("poison".into()), Fail::Retry, None);
    let poison = event("poison", 1);
    let mut events = vec![poison.clone(), event("poison", 2)];
    for n in 1..=20 {
        events.push(event(&format!("ok-{n}"), 1));
    }
    ctx.outbox.enqueue_many(&ctx.pool, &events).await.unwrap();

    let config = RelayConfig {
        max_attempts: 5,
        backoff_base_ms: 40,
        backoff_max_ms: 10_000,
        ..fast_config("r1")
    };
    let relay = start_relay(&ctx, &publisher, config).await;
    wait_until("the healthy aggregates to be delivered", LONG, || async {
        publisher
            .deliveries()
            .iter()
            .filter(|e| e.aggregate_id.starts_with("ok-"))
            .count()
            == 20
    })
    .await;
    wait_until("the poison event to be dead-lettered", LONG, || async {
        count(&ctx.pool, "SELECT count(*) FROM outbox_dead_letters").await >= 1
    })
    .await;

    // Attempts: exactly max_attempts, with growing gaps (equal jitter keeps
    // each gap within [base*2^(k-1)/2, base*2^(k-1)]).
    let times: Vec<_> = publisher
        .attempts()
        .iter()
        .filter(|a| a.id == poison.id)
        .map(|a| a.at)
        .collect();
    assert_eq!(times.len(), 5, "attempted exactly max_attempts times");
    let gaps: Vec<u128> = times
        .windows(2)
        .map(|w| (w[1] - w[0]).as_millis())
        .collect();
    for (k, gap) in gaps.iter().enumerate() {
        let full = 40u128 << k;
        assert!(
            *gap >= full / 2,
            "gap {k} was {gap} ms, expected at least {} ms ({gaps:?})",
            full / 2
        );
    }
    assert!(gaps[3] > gaps[0], "delays grow: {gaps:?}");

    let (attempts, error, seen_in_view): (i32, Option<String>, bool) =
        sqlx::query_as("SELECT attempts, last_error, true FROM outbox_dead_letters WHERE id = $1")
            .bind(poison.id)
            .fetch_one(&ctx.pool)
            .await
            .unwrap();
    assert!(seen_in_view);
    assert_eq!(attempts, 5);
    assert!(error.unwrap().contains("test failure"));

    // While the first poison event was retrying, its successor was held
    // back: it was never attempted before the first one was dead-lettered.
    let poison_dead_at = *times.last().unwrap();
    let early = publisher
        .attempts()
        .iter()
        .filter(|a| a.aggregate_id == "poison" && a.id != poison.id && a.at < poison_dead_at)
        .count();
    assert_eq!(early, 0, "later events of a retrying aggregate must wait");
    assert!(!publisher
        .deliveries()
        .iter()
        .any(|e| e.aggregate_id == "poison" && position(e) == 2));
    relay.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_rejected_event_is_dead_lettered_at_once_and_its_aggregate_moves_on() {
    let ctx = common::setup().await;
    let publisher = TestPublisher::new();
    let bad = event("a", 1);
    publisher.fail(Match::Id(bad.id), Fail::Reject, None);
    ctx.outbox
        .enqueue_many(&ctx.pool, &[bad.clone(), event("a", 2), event("b", 1)])
        .await
        .unwrap();
    let relay = start_relay(&ctx, &publisher, fast_config("r1")).await;
    wait_for_count(&ctx.pool, "the rest delivered", NOT_DEAD, 0).await;
    let stats = relay.shutdown().await.unwrap();
    assert_eq!(stats.dead_lettered, 1);
    let (attempts, error): (i32, String) =
        sqlx::query_as("SELECT attempts, last_error FROM outbox_dead_letters")
            .fetch_one(&ctx.pool)
            .await
            .unwrap();
    assert_eq!(attempts, 1);
    assert!(error.contains("rejection"), "{error}");
    let attempts_of_bad = publisher
        .attempts()
        .iter()
        .filter(|a| a.id == bad.id)
        .count();
    assert_eq!(attempts_of_bad, 1, "a rejection is not retried");
    let delivered: Vec<_> = publisher
        .deliveries()
        .iter()
        .map(|e| (e.aggregate_id.clone(), position(e)))
        .collect();
    assert!(delivered.contains(&("a".into(), 2)));
    assert!(delivered.contains(&("b".into(), 1)));
}
