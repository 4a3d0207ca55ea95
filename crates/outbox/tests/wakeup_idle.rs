//! Producers that know nothing about the relay (plain SQL) wake an idle
//! relay through the default trigger; a missed signal is covered by the
//! poll; a relay that died stops costing producers once its announcement
//! lapses.

mod common;

use std::time::{Duration, Instant};

use common::{count, fast_config, start_relay, wait_for_count, EVENTS, LONG};
use outbox::{MigrateOptions, RelayConfig, Schema, WakeupTrigger};
use outbox_testkit::{wait_until, TestPublisher};
use sqlx::PgPool;
use uuid::Uuid;

/// A relay that, without a signal, would find rows only every 2 s.
fn slow_poll(instance: &str) -> RelayConfig {
    RelayConfig {
        poll_min_ms: 2_000,
        poll_max_ms: 2_000,
        ..fast_config(instance)
    }
}

async fn insert_plain<'e>(conn: impl sqlx::PgExecutor<'e>, aggregate: &str) -> Uuid {
    sqlx::query_scalar(
        "INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload)
         VALUES ('order', $1, 'order.created', '{}') RETURNING id",
    )
    .bind(aggregate)
    .fetch_one(conn)
    .await
    .unwrap()
}

async fn delivered_within(publisher: &TestPublisher, id: Uuid, limit: Duration) -> Duration {
    let start = Instant::now();
    while start.elapsed() < limit {
        if publisher.deliveries().iter().any(|e| e.id == id) {
            return start.elapsed();
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    panic!("event {id} not delivered within {limit:?}");
}

/// 1 while a relay's idle announcement lasts (the time the producers'
/// trigger reads is ahead), else 0.
async fn live_idle_announcements(pool: &PgPool) -> i64 {
    count(
        pool,
        "SELECT (coalesce(pg_sequence_last_value('outbox_relay_idle_until'), 0)
                 > date_part('epoch', now()) * 1000)::int::bigint",
    )
    .await
}

/// Waits up to [`LONG`] for `what`: exactly one live idle announcement.
async fn wait_for_one_idle_announcement(pool: &PgPool, what: &str) {
    wait_until(what, LONG, || async {
        live_idle_announcements(pool).await == 1
    })
    .await;
}

/// A relay started with `config` that has announced itself idle.
async fn idle_relay(
    ctx: &common::Ctx,
    publisher: &TestPublisher,
    config: RelayConfig,
) -> outbox::RelayHandle {
    let relay = start_relay(ctx, publisher, config).await;
    wait_for_one_idle_announcement(&ctx.pool, "the relay to announce that it is idle").await;
    relay
}

/// A connection listening on the default schema's wake-up channel.
async fn wakeup_listener(pool: &PgPool) -> sqlx::postgres::PgListener {
    let mut listener = sqlx::postgres::PgListener::connect_with(pool)
        .await
        .unwrap();
    listener.listen("outbox_event").await.unwrap();
    listener
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_relay_delivers_a_plain_sql_insert_well_before_its_next_poll() {
    let ctx = common::setup().await;
    let publisher = TestPublisher::new();
    let relay = idle_relay(&ctx, &publisher, slow_poll("idle")).await;
    // Idle longer than a poll interval, then one event at a time: each must
    // arrive far sooner than the 2 s poll would bring it (five in a row
    // could not all be lucky polls).
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    let mut took = Vec::new();
    for n in 0..5 {
        let id = insert_plain(&ctx.pool, &format!("a{n}")).await;
        took.push(delivered_within(&publisher, id, Duration::from_secs(10)).await);
        tokio::time::sleep(Duration::from_millis(300 + 97 * n)).await;
    }
    assert!(
        took.iter().all(|t| *t < Duration::from_millis(500)),
        "every pick-up well under the 2 s poll: {took:?}"
    );
    relay.shutdown().await.unwrap();
    assert_eq!(
        live_idle_announcements(&ctx.pool).await,
        0,
        "a stopped relay withdraws its announcement"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sparse_stream_is_claimed_as_each_commit_wakes_the_relay_and_it_stays_announced() {
    let ctx = common::setup().await;
    let publisher = TestPublisher::new();
    let relay = idle_relay(&ctx, &publisher, slow_poll("sparse")).await;
    let mut listener = wakeup_listener(&ctx.pool).await;
    // One commit every 40 ms: a tenth of an event per 4-ms budget. Each
    // must arrive far sooner than the 2 s poll, so by its own wake-up, and
    // the relay must stay announced between them (every commit notifies).
    let mut took = Vec::new();
    for n in 0..25 {
        let id = insert_plain(&ctx.pool, &format!("s{}", n % 5)).await;
        took.push(delivered_within(&publisher, id, Duration::from_secs(10)).await);
        tokio::time::sleep(Duration::from_millis(40)).await;
    }
    let mut notifications = 0;
    while let Ok(Ok(_)) = tokio::time::timeout(Duration::from_millis(200), listener.recv()).await {
        notifications += 1;
    }
    assert!(
        took.iter().all(|t| *t < Duration::from_millis(500)),
        "every pick-up well under the 2 s poll: {took:?}"
    );
    assert_eq!(notifications, 25, "every sparse commit wakes the relay");
    assert_eq!(live_idle_announcements(&ctx.pool).await, 1);
    wait_for_count(&ctx.pool, "the acknowledgements", EVENTS, 0).await;
    relay.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bursts_and_pauses_lose_nothing_and_a_missed_signal_is_covered_by_the_poll() {
    let ctx = common::setup().await;
    let publisher = TestPublisher::new();
    let relay = start_relay(
        &ctx,
        &publisher,
        RelayConfig {
            poll_min_ms: 500,
            poll_max_ms: 500,
            ..fast_config("flips")
        },
    )
    .await;
    let mut ids = Vec::new();
    for burst in 0..6u64 {
        // Several producers at once, then a pause long enough to go idle.
        let mut tasks = Vec::new();
        for p in 0..4 {
            let pool = ctx.pool.clone();
            tasks.push(tokio::spawn(async move {
                let mut mine = Vec::new();
                for n in 0..50 {
                    mine.push(insert_plain(&pool, &format!("b{burst}-p{p}-{}", n % 5)).await);
                }
                mine
            }));
        }
        for t in tasks {
            ids.extend(t.await.unwrap());
        }
        tokio::time::sleep(Duration::from_millis(150 + 131 * burst)).await;
    }
    wait_for_count(&ctx.pool, "every burst to be delivered", EVENTS, 0).await;
    let delivered: std::collections::HashSet<Uuid> =
        publisher.deliveries().iter().map(|e| e.id).collect();
    assert!(ids.iter().all(|id| delivered.contains(id)), "nothing lost");

    // A signal that never comes: the insert runs with triggers disabled, as
    // a replication apply would. The poll still brings it within its bound.
    wait_for_one_idle_announcement(&ctx.pool, "the relay to be idle again").await;
    let mut tx = ctx.pool.begin().await.unwrap();
    common::execute(&mut *tx, "SET LOCAL session_replication_role = replica").await;
    let silent = insert_plain(&mut *tx, "silent").await;
    tx.commit().await.unwrap();
    let took = delivered_within(&publisher, silent, Duration::from_secs(10)).await;
    assert!(
        took < Duration::from_millis(500 + 1_000),
        "the fallback poll bounds a missed signal: {took:?}"
    );
    relay.shutdown().await.unwrap();
}

/// The announcement is not a row a producer's snapshot may predate: a
/// `REPEATABLE READ` producer that took its snapshot before the relay went
/// idle still wakes it (a row written after the snapshot would be
/// invisible to the trigger's check, leaving the event to the 2 s poll).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_producer_whose_snapshot_predates_the_announcement_still_wakes_the_relay() {
    let ctx = common::setup().await;
    let publisher = TestPublisher::new();
    let mut tx = ctx.pool.begin().await.unwrap();
    common::execute(&mut *tx, "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ").await;
    let before: i64 = sqlx::query_scalar("SELECT count(*) FROM outbox_events")
        .fetch_one(&mut *tx)
        .await
        .unwrap();
    assert_eq!(before, 0, "the snapshot is taken");
    let relay = idle_relay(&ctx, &publisher, slow_poll("late-snapshot")).await;
    // Let the relay's last look after announcing pass, so only a signal
    // brings the row before the poll.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let id = insert_plain(&mut *tx, "rr").await;
    tx.commit().await.unwrap();
    let took = delivered_within(&publisher, id, Duration::from_secs(10)).await;
    assert!(
        took < Duration::from_millis(1_000),
        "woken, not polled (the poll is every 2 s): {took:?}"
    );
    relay.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn producers_stop_notifying_once_a_dead_relays_announcement_lapses() {
    let ctx = common::setup().await;
    let publisher = TestPublisher::new();
    // lease_ms is also how long an idle announcement lasts.
    let relay = idle_relay(&ctx, &publisher, slow_poll("doomed")).await;
    relay.abort();
    let mut listener = wakeup_listener(&ctx.pool).await;
    insert_plain(&ctx.pool, "while-announced").await;
    tokio::time::timeout(Duration::from_secs(5), listener.recv())
        .await
        .expect("a notification while the announcement lasts")
        .unwrap();

    wait_until("the dead relay's announcement to lapse", LONG, || async {
        live_idle_announcements(&ctx.pool).await == 0
    })
    .await;
    for n in 0..20 {
        insert_plain(&ctx.pool, &format!("after-{n}")).await;
    }
    let extra = tokio::time::timeout(Duration::from_millis(500), listener.recv()).await;
    assert!(
        extra.is_err(),
        "no notification once no relay is idle: {extra:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_denser_than_the_latency_budget_keeps_the_relay_awake_and_producers_send_almost_no_notifications(
) {
    let ctx = common::setup().await;
    let publisher = TestPublisher::new();
    // A budget long enough that one commit every 5 ms (plus the insert's
    // own time, on a loaded machine) is several events per budget: dense.
    let config = RelayConfig {
        latency_budget_ms: 100,
        ..fast_config("steady")
    };
    let relay = idle_relay(&ctx, &publisher, config).await;
    let mut listener = wakeup_listener(&ctx.pool).await;

    // 300 commits, one every 5 ms: only those before the relay has seen
    // the rate (over its first 50 ms) should find it announced as asleep.
    let mut ids = Vec::new();
    for n in 0..300 {
        ids.push(insert_plain(&ctx.pool, &format!("steady-{}", n % 10)).await);
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    wait_for_count(&ctx.pool, "the stream to be delivered", EVENTS, 0).await;
    let mut notifications = 0;
    while let Ok(Ok(_)) = tokio::time::timeout(Duration::from_millis(200), listener.recv()).await {
        notifications += 1;
    }
    relay.shutdown().await.unwrap();

    let delivered = publisher.deliveries();
    assert!(ids.iter().all(|id| delivered.iter().any(|e| e.id == *id)));
    assert!(
        (1..=30).contains(&notifications),
        "{notifications} notifications for 300 steady commits: the relay flipped between busy and idle"
    );
}

#[tokio::test]
async fn the_wakeup_trigger_modes_switch_and_report() {
    let ctx = common::setup().await;
    let mut conn = ctx.pool.acquire().await.unwrap();
    let schema = Schema::default();
    let with = |wakeup| MigrateOptions {
        wakeup: Some(wakeup),
        ..MigrateOptions::default()
    };
    let fresh = outbox::migrate(&mut conn, &schema, &MigrateOptions::default())
        .await
        .unwrap();
    assert_eq!(fresh.wakeup, WakeupTrigger::Idle, "the default mode");
    for mode in [
        WakeupTrigger::EveryInsert,
        WakeupTrigger::Off,
        WakeupTrigger::Idle,
    ] {
        let report = outbox::migrate(&mut conn, &schema, &with(mode))
            .await
            .unwrap();
        assert_eq!(report.wakeup, mode);
        assert_eq!(report.notify_trigger, mode == WakeupTrigger::EveryInsert);
        let triggers = count(
            &ctx.pool,
            "SELECT count(*) FROM pg_trigger WHERE tgname IN ('outbox_insert_notify', 'outbox_wake_idle_relay')",
        )
        .await;
        assert_eq!(triggers, i64::from(mode != WakeupTrigger::Off), "{mode:?}");
        // Exactly one statement trigger takes the transaction id first: the
        // idle trigger's function (migration 9: a PL/pgSQL call costs less
        // than a WHEN parsed at every statement), or else outbox_xid_first
        // in its WHEN, so its function never runs.
        let first = count(
            &ctx.pool,
            "SELECT count(*) FILTER (WHERE tgqual IS NOT NULL) * 10 + count(*) FROM pg_trigger
             WHERE tgname IN ('outbox_wake_idle_relay', 'outbox_xid_first')",
        )
        .await;
        let expected = if mode == WakeupTrigger::Idle { 1 } else { 11 };
        assert_eq!(first, expected, "{mode:?}: one such trigger");
    }
}
