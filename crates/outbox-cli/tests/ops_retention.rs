//! Retention mode in the relay program: processed rows are kept, then the
//! cleaner running inside `outbox relay` removes them once expired.

mod common;

use std::process::Stdio;
use std::time::Duration;

use outbox::Outbox;
use outbox_testkit::postgres::migrated_test_db;
use outbox_testkit::wait_until;

async fn count(pool: &sqlx::PgPool, sql: &str) -> i64 {
    sqlx::query_scalar(sql).fetch_one(pool).await.unwrap()
}

#[tokio::test]
async fn the_relay_keeps_processed_rows_and_its_cleaner_removes_expired_ones() {
    let (db, pool) = migrated_test_db().await;
    let events: Vec<_> = (1..=50).map(|n| common::event("r", n)).collect();
    Outbox::new().enqueue_many(&pool, &events).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut relay = common::bin()
        .env("DATABASE_URL", &db.url)
        .env("OUTBOX_CLEANER_EVENTS_RETENTION_SECS", "2")
        .env("OUTBOX_CLEANER_INTERVAL_SECS", "1")
        .args(["relay", "--keep-processed", "--publisher"])
        .arg(format!("file:{}", dir.path().join("out.jsonl").display()))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let processed = "SELECT count(*) FROM outbox_events WHERE processed_at IS NOT NULL";
    wait_until(
        "every event processed and kept",
        Duration::from_secs(30),
        || async { count(&pool, processed).await == 50 },
    )
    .await;
    // A dead letter is never cleaned up, however old.
    sqlx::query(
        "INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload,
                                    dead_lettered_at, last_error)
         VALUES ('order', 'dl', 'order.created', '{}', now() - interval '30 days', 'x')",
    )
    .execute(&pool)
    .await
    .unwrap();
    wait_until(
        "the cleaner to remove the expired rows",
        Duration::from_secs(30),
        || async { count(&pool, processed).await == 0 },
    )
    .await;
    assert_eq!(
        count(&pool, "SELECT count(*) FROM outbox_dead_letters").await,
        1
    );
    let _ = std::process::Command::new("kill")
        .args(["-TERM", &relay.id().to_string()])
        .status();
    assert!(relay.wait().unwrap().success());
}
