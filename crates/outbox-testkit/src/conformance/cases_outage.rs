//! The cases that take the broker down: a relay meeting an outage, and a
//! broker restarted under load.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use outbox::{NewEvent, Publisher};
use sqlx::PgPool;

use super::events::{enqueue, enqueue_interleaved, event, new_event};
use super::relay::{dead_letters, migrated_scope, relay_state, spawn_relay};
use super::scope::Scope;
use super::verify::{check_delivered, read_back, Run};
use super::Harness;
use crate::wait::{wait_until, wait_until_or_explain};

/// How long a relay may take to deliver everything once the broker is back.
const RESUMED_WITHIN: Duration = Duration::from_secs(180);

/// With the broker down, a publish is a transport outage
/// ([`outbox::Unavailable`]): the relay keeps trying without counting
/// attempts or dead-lettering anything, and delivers everything once the
/// broker is back.
pub async fn outage_burns_no_attempts<H: Harness>(h: &H, pool: &PgPool) {
    let run = Run::start(h, "outage_burns_no_attempts");
    let (name, case) = (&run.name, run.case);
    if !h.capabilities().stop_start {
        eprintln!("conformance {name}: {case} not applicable (cannot stop the broker)");
        return;
    }
    let scope = migrated_scope(h, pool, "outage").await;
    h.stop_broker().await;
    let stopped = Instant::now();

    // A direct publish says "unavailable", not "failed event".
    let probe = h.publisher().await;
    let outcome = tokio::time::timeout(
        Duration::from_secs(60),
        probe.publish(&[event(&Scope::new("probe"), "probe", 0)]),
    )
    .await
    .unwrap_or_else(|_| {
        panic!("{name} / {case}: publish with the broker down did not return within 60 s")
    });
    match outcome {
        Err(e) => assert!(!e.message.is_empty(), "{name} / {case}: the outage says what failed"),
        Ok(outcomes) => panic!(
            "{name} / {case}: with the broker down, publish must return Err(Unavailable), not per-event outcomes {outcomes:?}"
        ),
    }
    assert!(
        probe.health().await.is_err(),
        "{name} / {case}: the health check must fail while the broker is down"
    );
    drop(probe);

    let expected = enqueue_interleaved(pool, &scope, "agg", 20, 10).await;
    let relay = spawn_relay(h, pool, 100).await;
    wait_until(
        &format!("{name}: the relay to meet the outage 3 times"),
        Duration::from_secs(120),
        || {
            let outages = relay.stats().outages;
            async move { outages >= 3 }
        },
    )
    .await;
    let (max_attempts, still_pending): (Option<i32>, i64) = sqlx::query_as(
        "SELECT max(attempts), count(*) FILTER (WHERE processed_at IS NULL AND dead_lettered_at IS NULL) FROM outbox_events",
    )
    .fetch_one(pool)
    .await
    .expect("reading attempts");
    assert_eq!(
        max_attempts,
        Some(0),
        "{name} / {case}: an outage must not count attempts"
    );
    assert_eq!(
        still_pending,
        expected.len() as i64,
        "{name} / {case}: nothing delivered while down"
    );
    assert!(
        dead_letters(pool).await.is_empty(),
        "{name} / {case}: nothing dead-lettered by an outage"
    );
    let stats = relay.stats();
    assert_eq!(
        (stats.delivered, stats.retried, stats.dead_lettered),
        (0, 0, 0),
        "{name} / {case}: {stats:?}"
    );

    let down_for = stopped.elapsed();
    h.start_broker().await;
    let resumed = "delivery to resume after the broker returned";
    let stats = run
        .drain_and_stop(relay, pool, resumed, RESUMED_WITHIN)
        .await;
    check_delivered(h, pool, &run, &scope, &expected, Duration::from_secs(60)).await;
    run.done(&format!(
        "{} outages while down for {down_for:.2?}, {} retried",
        stats.outages, stats.retried
    ));
}

/// A producer keeps writing while the relay publishes; the broker is killed
/// in the middle and started again. Nothing is lost, nothing is
/// dead-lettered, and first deliveries stay in order per aggregate.
pub async fn survives_a_broker_restart<H: Harness>(h: &H, pool: &PgPool) {
    let run = Run::start(h, "survives_a_broker_restart");
    let (name, case) = (&run.name, run.case);
    if !h.capabilities().keeps_data_across_restart {
        eprintln!(
            "conformance {name}: {case} not applicable (the broker loses its data on restart)"
        );
        return;
    }
    let scope = migrated_scope(h, pool, "restart").await;

    let stop = Arc::new(AtomicBool::new(false));
    let producer = tokio::spawn({
        let (pool, scope, stop) = (pool.clone(), scope.clone(), stop.clone());
        async move {
            let mut expected = HashMap::new();
            let mut n = 0_i64;
            while !stop.load(Ordering::SeqCst) {
                let chunk: Vec<NewEvent> = (0..20)
                    .map(|a| new_event(&scope, &format!("agg{a}"), n, None))
                    .collect();
                expected.extend(enqueue(&pool, &chunk).await);
                n += 1;
                // Paces the load (about 1,000 events/s); no test step waits on it.
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            expected
        }
    });
    let relay = spawn_relay(h, pool, 100).await;
    let delivered_at_least = |n: u64| {
        let relay = &relay;
        move || {
            let d = relay.stats().delivered;
            async move { d >= n }
        }
    };
    wait_until(
        &format!("{name}: 500 deliveries before the restart"),
        Duration::from_secs(120),
        delivered_at_least(500),
    )
    .await;
    let outages_before = relay.stats().outages;
    h.stop_broker().await;
    let at_stop = relay.stats().delivered;
    wait_until(
        &format!("{name}: the relay to notice the broker is gone"),
        Duration::from_secs(120),
        || {
            let o = relay.stats().outages;
            async move { o > outages_before }
        },
    )
    .await;
    h.start_broker().await;
    wait_until_or_explain(
        &format!("{name}: 500 more deliveries after the restart"),
        Duration::from_secs(180),
        delivered_at_least(at_stop + 500),
        || async { format!("relay {:?}; {}", relay.stats(), relay_state(pool).await) },
    )
    .await;
    stop.store(true, Ordering::SeqCst);
    let expected = producer.await.expect("producer task");
    let stats = run
        .drain_and_stop(relay, pool, "relay to deliver everything", RESUMED_WITHIN)
        .await;
    run.assert_no_dead_letters(pool, "a broker restart dead-lettered events")
        .await;
    let received = read_back(h, &run, &scope, &expected, Duration::from_secs(120)).await;
    run.done(&format!(
        "{} events, {} messages read back ({} duplicates), {} outages, {} retried",
        expected.len(),
        received.len(),
        received.len() - expected.len(),
        stats.outages,
        stats.retried
    ));
}
