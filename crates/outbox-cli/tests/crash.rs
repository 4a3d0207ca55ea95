//! At least once under crashes: the relay is killed with SIGKILL at random
//! moments while producers write; after restarts every event is delivered,
//! in order per aggregate.

mod common;

use std::time::{Duration, Instant};

use outbox::Outbox;
use outbox_testkit::postgres::migrated_test_db;
use rand::Rng;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_at_random_moments_loses_nothing_and_keeps_order() {
    let (db, pool) = migrated_test_db().await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("events.jsonl");

    // 300 aggregates x 70 events = 21,000 events, written in rounds so each
    // aggregate's events are committed in order: two thirds before the
    // relay starts (a backlog to be killed in), the rest while it runs.
    let (aggs, rounds) = (300, 70);
    let mut all = Vec::new();
    let mut chunks = Vec::new();
    for n in 1..=rounds {
        let round: Vec<_> = (0..aggs)
            .map(|a| common::event(&format!("agg-{a}"), n))
            .collect();
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
        let mut child = common::spawn_relay(&db.url, &file, "crashy", &[]);
        let wait = rand::rng().random_range(60..350);
        tokio::time::sleep(Duration::from_millis(wait)).await;
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        let pending: i64 = sqlx::query_scalar("SELECT count(*) FROM outbox_events")
            .fetch_one(&pool)
            .await
            .unwrap();
        let delivered = common::read_deliveries(&file).len();
        eprintln!("kill {round} after {wait} ms: {delivered} lines written, {pending} pending");
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
    let out = common::bin()
        .env("DATABASE_URL", &db.url)
        .args(["relay", "--drain", "--publisher"])
        .arg(format!("file:{}", file.display()))
        .args(["--instance-id", "crashy", "--lease-ms", "1500"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "drain failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
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
