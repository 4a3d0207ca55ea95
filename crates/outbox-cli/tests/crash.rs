//! At least once under crashes: the relay is killed with SIGKILL at random
//! moments while producers write; after restarts every event is delivered,
//! in order per aggregate.

mod common;

use std::time::{Duration, Instant};

use outbox::Outbox;
use rand::Rng;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_at_random_moments_loses_nothing_and_keeps_order() {
    let (db, pool, _dir, file) = common::db_and_events_file().await;

    // 300 aggregates x 70 events = 21,000 events, written in rounds so each
    // aggregate's events are committed in order: two thirds before the
    // relay starts (a backlog to be killed in), the rest while it runs.
    let (aggs, rounds) = (300, 70);
    let mut all = Vec::new();
    let mut chunks = Vec::new();
    for n in 1..=rounds {
        let round = common::round(aggs, n);
        all.extend(round.iter().map(|e| e.id));
        chunks.push(round);
    }
    let outbox = Outbox::new();
    let late = chunks.split_off(46);
    for chunk in chunks {
        outbox.enqueue_many(&pool, &chunk).await.unwrap();
    }
    let producer = {
        let pool = pool.clone();
        tokio::spawn(async move {
            let outbox = Outbox::new();
            for chunk in late {
                let mut tx = pool.begin().await.unwrap();
                outbox.enqueue_many(&mut *tx, &chunk).await.unwrap();
                tx.commit().await.unwrap();
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
    };

    let mut kills_mid_run = 0;
    for round in 0..6 {
        let before = common::read_deliveries(&file).len();
        let mut child = common::spawn_relay(&db.url, &file, "crashy", &[]);
        // Kill at a random moment of the delivery, not of the start-up: a
        // relay that delivers faster than the rounds are long would
        // otherwise drain everything before most kills (seen: all 21,400
        // lines by the third kill).
        let started = Instant::now();
        while common::read_deliveries(&file).len() == before
            && started.elapsed() < Duration::from_secs(3)
        {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        let wait = rand::rng().random_range(0..150);
        tokio::time::sleep(Duration::from_millis(wait)).await;
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        let pending: i64 = sqlx::query_scalar("SELECT count(*) FROM outbox_events")
            .fetch_one(&pool)
            .await
            .unwrap();
        let delivered = common::read_deliveries(&file).len();
        eprintln!(
            "kill {round} {wait} ms into delivering: {delivered} lines written, {pending} pending"
        );
        if pending > 0 && delivered > 0 {
            kills_mid_run += 1;
        }
    }
    producer.await.unwrap();
    assert!(
        kills_mid_run >= 3,
        "the kills must land mid-run ({kills_mid_run})"
    );

    let started = Instant::now();
    let drain_args = ["--instance-id", "crashy", "--lease-ms", "1500"];
    common::drain_to_file(&db.url, &file, &drain_args);
    let (lines, dups) = common::check_deliveries(&file, &all);
    eprintln!(
        "{} events, {lines} lines, {dups} duplicates, final drain {:?}",
        all.len(),
        started.elapsed()
    );
    assert_eq!(all.len(), 21_000);
    // Duplicates are bounded by the in-flight window: a kill repeats at most
    // the batch delivered but not yet acknowledged plus the one being
    // published (2 x --batch-size 200).
    assert!(
        dups <= 6 * common::IN_FLIGHT_WINDOW,
        "{dups} duplicates after 6 kills"
    );
}

/// Whether the time the producers' wake-up trigger reads (the idle
/// announcement, migration 7) is still ahead of now.
async fn idle_announced(pool: &sqlx::PgPool) -> bool {
    sqlx::query_scalar(
        "SELECT coalesce(pg_sequence_last_value('outbox_relay_idle_until'), 0)
                > date_part('epoch', now()) * 1000",
    )
    .fetch_one(pool)
    .await
    .unwrap()
}

async fn insert_plain(pool: &sqlx::PgPool, aggregate: &str) {
    sqlx::query(
        "INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload)
         VALUES ('order', $1, 'order.created', '{}')",
    )
    .bind(aggregate)
    .execute(pool)
    .await
    .unwrap();
}

/// `outbox relay` SIGKILLed while idle: its announcement outlives it only
/// until it lapses (one lease, 1.5 s here, after its last refresh); from
/// then on the trigger's state says no relay sleeps and producers' commits
/// send no notification.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relay_killed_while_idle_stops_costing_producers_once_its_announcement_lapses() {
    let (db, pool, _dir, file) = common::db_and_events_file().await;
    let mut child = common::spawn_relay(&db.url, &file, "idle-then-killed", &[]);
    let long = Duration::from_secs(60);
    outbox_testkit::wait_until("the relay to announce that it is idle", long, || async {
        idle_announced(&pool).await
    })
    .await;
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();

    let mut listener = sqlx::postgres::PgListener::connect_with(&pool)
        .await
        .unwrap();
    listener.listen("outbox_event").await.unwrap();
    if idle_announced(&pool).await {
        insert_plain(&pool, "while-announced").await;
        tokio::time::timeout(Duration::from_secs(5), listener.recv())
            .await
            .expect("a notification while the announcement lasts")
            .unwrap();
    }
    outbox_testkit::wait_until("the dead relay's announcement to lapse", long, || async {
        !idle_announced(&pool).await
    })
    .await;
    for n in 0..20 {
        insert_plain(&pool, &format!("after-{n}")).await;
    }
    let extra = tokio::time::timeout(Duration::from_millis(500), listener.recv()).await;
    assert!(
        extra.is_err(),
        "no notification once no relay is idle: {extra:?}"
    );
}
