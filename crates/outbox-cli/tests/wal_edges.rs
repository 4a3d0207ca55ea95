//! The WAL mode's edges as users meet them: `outbox relay` as its own
//! process, producers calling `outbox_emit` by plain SQL from another
//! connection, `outbox migrate --mode table` run while a producer's
//! transaction is open, `relay --drain` with events behind unrelated WAL,
//! and a slot the server invalidated.

mod common;

use std::time::{Duration, Instant};

use sqlx::PgPool;

fn migrate(url: &str, args: &[&str]) -> std::process::Output {
    let mut all = vec!["migrate"];
    all.extend(args);
    common::run(&all, Some(url))
}

async fn cluster(
    extra: &'static [(&'static str, &'static str)],
) -> outbox_testkit::postgres::PgCluster {
    tokio::task::spawn_blocking(move || outbox_testkit::postgres::logical_cluster(extra))
        .await
        .unwrap()
}

async fn emit(pool: &PgPool, agg: &str, n: i64) -> uuid::Uuid {
    sqlx::query_scalar(
        "SELECT outbox_emit('order', $1, 'order.updated', jsonb_build_object('n', $2::bigint))",
    )
    .bind(agg)
    .bind(n)
    .fetch_one(pool)
    .await
    .unwrap()
}

fn wait_for_lines(file: &std::path::Path, n: usize, within: Duration) {
    let started = Instant::now();
    while common::read_deliveries(file).len() < n {
        assert!(
            started.elapsed() < within,
            "{} of {n} delivered",
            common::read_deliveries(file).len()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_committed_across_migrate_mode_table_is_delivered_in_its_aggregates_order() {
    let cluster = cluster(&[]).await;
    let url = cluster.url();
    let out = migrate(&url, &["--mode", "wal"]);
    assert!(out.status.success(), "{}", common::text(&out.stderr));
    let pool = PgPool::connect(&url).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("events.jsonl");
    let mut relay = common::spawn_relay(&url, &file, "r1", &[]);
    let mut expected = vec![emit(&pool, "A", 1).await];
    // A producer's transaction, open while the switch runs.
    let mut tx = pool.begin().await.unwrap();
    let across: uuid::Uuid = sqlx::query_scalar(
        "SELECT outbox_emit('order', 'A', 'order.updated', jsonb_build_object('n', 2))",
    )
    .fetch_one(&mut *tx)
    .await
    .unwrap();
    expected.push(across);
    let switch = common::bin()
        .env("DATABASE_URL", &url)
        .args(["migrate", "--mode", "table", "--switch-timeout", "60"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let waiting: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM outbox_wal WHERE switch_seq_next IS NOT NULL AND switch_mark_lsn IS NULL",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(waiting, 1, "the switch waits for the open transaction");
    tx.commit().await.unwrap();
    let out = tokio::task::spawn_blocking(move || switch.wait_with_output().unwrap())
        .await
        .unwrap();
    assert!(out.status.success(), "{}", common::text(&out.stderr));
    // A plain INSERT after the switch: a row, after the event before it.
    let row: uuid::Uuid = sqlx::query_scalar(
        "INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload)
         VALUES ('order', 'A', 'order.updated', '{\"n\": 3}') RETURNING id",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    expected.push(row);
    let f = file.clone();
    tokio::task::spawn_blocking(move || wait_for_lines(&f, 3, Duration::from_secs(60)))
        .await
        .unwrap();
    // Panics on an event lost or out of its aggregate's order.
    let (delivered, duplicates) = common::check_deliveries(&file, &expected);
    assert_eq!((delivered, duplicates), (expected.len(), 0));
    let _ = common::stop_gracefully(&mut relay, Duration::from_secs(10));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relay_drain_in_the_wal_mode_exits_only_once_the_slot_is_read() {
    let cluster = cluster(&[]).await;
    let url = cluster.url();
    let out = migrate(&url, &["--mode", "wal"]);
    assert!(out.status.success(), "{}", common::text(&out.stderr));
    let pool = PgPool::connect(&url).await.unwrap();
    let mut expected = Vec::new();
    for n in 1..=20 {
        expected.push(emit(&pool, &format!("a{}", n % 4), n).await);
    }
    // Tens of megabytes of WAL that carry no event, after the events.
    sqlx::query(
        "CREATE TABLE unrelated AS
         SELECT g, repeat(md5(g::text), 16) AS pad FROM generate_series(1, 100000) g",
    )
    .execute(&pool)
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("events.jsonl");
    let out = common::bin()
        .env("DATABASE_URL", &url)
        .args(["relay", "--drain", "--publisher"])
        .arg(format!("file:{}", file.display()))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", common::text(&out.stderr));
    assert!(
        common::text(&out.stderr).contains("delivered 20 events"),
        "{}",
        common::text(&out.stderr)
    );
    // Panics on an event lost or out of its aggregate's order.
    let (delivered, duplicates) = common::check_deliveries(&file, &expected);
    assert_eq!((delivered, duplicates), (expected.len(), 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slot_the_server_invalidated_stops_the_relay_in_one_line_and_status_says_what_to_do() {
    let cluster = cluster(&[("max_slot_wal_keep_size", "1MB")]).await;
    let url = cluster.url();
    let out = migrate(&url, &["--mode", "wal"]);
    assert!(out.status.success(), "{}", common::text(&out.stderr));
    let pool = PgPool::connect(&url).await.unwrap();
    emit(&pool, "a", 1).await;
    // More WAL than the slot may keep, and checkpoints to remove it.
    for round in 0..4 {
        sqlx::query(&format!(
            "CREATE TABLE filler_{round} AS
             SELECT g, repeat(md5(g::text), 16) AS pad FROM generate_series(1, 60000) g"
        ))
        .execute(&pool)
        .await
        .unwrap();
        sqlx::query("CHECKPOINT").execute(&pool).await.unwrap();
    }
    let lost: String = sqlx::query_scalar(
        "SELECT coalesce(wal_status, '') FROM pg_replication_slots WHERE slot_name LIKE 'outbox%'",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(lost, "lost", "the server invalidated the slot");
    let status = common::run(&["status"], Some(&url));
    let said = common::text(&status.stdout);
    assert!(
        said.contains("INVALIDATED") && said.contains("outbox migrate --mode wal"),
        "{said}"
    );
    let line = common::one_error_line(&common::relay_to_a_file(&url));
    assert!(
        line.contains("invalidated") && line.contains("outbox migrate --mode wal"),
        "{line}"
    );
    // The way out works: a new slot, read from now on.
    let out = migrate(&url, &["--mode", "wal"]);
    assert!(out.status.success(), "{}", common::text(&out.stderr));
    assert!(
        common::text(&out.stderr).contains("created again"),
        "{}",
        common::text(&out.stderr)
    );
}
