//! What a relay of many sources (`[[source]]` entries) serves beside the
//! delivery, as the relay of one source does, with `outbox relay` as its own
//! process against a real PostgreSQL: the cleaner in retention mode, in
//! every source's schema.

mod common;

use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::Duration;

use outbox_testkit::postgres::{test_db, TestDb};
use outbox_testkit::wait::wait_until_or_explain;
use sqlx::PgPool;

/// A database with the schemas `sa`, `sb` and `tenant_1` migrated by
/// `outbox migrate --schema`.
async fn setup() -> (TestDb, PgPool) {
    let db = test_db().await;
    for schema in ["sa", "sb", "tenant_1"] {
        let out = common::run(&["migrate", "--schema", schema], Some(&db.url));
        assert!(out.status.success(), "{}", common::text(&out.stderr));
    }
    let pool = db.pool().await;
    (db, pool)
}

/// A config file on `db`: `head` (top-level keys and tables), then the
/// sources `a` (schema `sa`), `b` (schema `sb`) and `more`.
fn config(dir: &Path, db: &TestDb, head: &str, more: &str) -> PathBuf {
    let path = dir.join("outbox.toml");
    std::fs::write(
        &path,
        format!(
            "database_url = {:?}\n{head}\n\
             [[source]]\nname = \"a\"\nschema = \"sa\"\n\n\
             [[source]]\nname = \"b\"\nschema = \"sb\"\n{more}",
            db.url
        ),
    )
    .unwrap();
    path
}

/// `n` pending events of aggregate `{schema}-live` into `schema`, and one
/// dead letter of aggregate `{schema}-dl` (never delivered, never cleaned).
async fn insert(pool: &PgPool, schema: &str, n: i64) {
    sqlx::query(&format!(
        "INSERT INTO {schema}.outbox_events (aggregate_type, aggregate_id, event_type, payload)
         SELECT 'order', '{schema}-live', 'order.created', jsonb_build_object('n', n)
         FROM generate_series(1, $1) AS n"
    ))
    .bind(n)
    .execute(pool)
    .await
    .unwrap();
    sqlx::query(&format!(
        "INSERT INTO {schema}.outbox_events (aggregate_type, aggregate_id, event_type, payload,
                                             attempts, last_error, dead_lettered_at)
         VALUES ('order', '{schema}-dl', 'order.created', '{{}}', 10, 'broker said no',
                 now() - interval '30 days')"
    ))
    .execute(pool)
    .await
    .unwrap();
}

/// Processed (kept) rows of `schema`.
async fn processed(pool: &PgPool, schema: &str) -> i64 {
    sqlx::query_scalar(&format!(
        "SELECT count(*) FROM {schema}.outbox_events WHERE processed_at IS NOT NULL"
    ))
    .fetch_one(pool)
    .await
    .unwrap()
}

async fn dead_letters(pool: &PgPool, schema: &str) -> i64 {
    sqlx::query_scalar(&format!(
        "SELECT count(*) FROM {schema}.outbox_events WHERE dead_lettered_at IS NOT NULL"
    ))
    .fetch_one(pool)
    .await
    .unwrap()
}

/// Kills the relay when a test ends early.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// In retention mode every source keeps its processed rows, and the
/// relay's cleaner removes the expired ones from each source's schema, as
/// it does for a relay of one source; dead letters stay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relay_of_many_sources_keeps_processed_rows_and_cleans_every_sources_schema() {
    let (db, pool) = setup().await;
    let dir = tempfile::tempdir().unwrap();
    let (events, log) = (
        dir.path().join("events.jsonl"),
        dir.path().join("relay.log"),
    );
    let head = format!(
        "publisher = {:?}\n\n[relay]\nretention = \"keep\"\npoll_max_ms = 50\n\n\
         [cleaner]\nevents_retention_secs = 2\ninterval_secs = 1\n",
        format!("file:{}", events.display())
    );
    let file = config(dir.path(), &db, &head, "");
    insert(&pool, "sa", 20).await;
    insert(&pool, "sb", 30).await;
    let mut relay = Killed(common::spawn_relay_with_config(&file, "r1", &log, &[]));
    let explain = || async { std::fs::read_to_string(&log).unwrap_or_default() };
    wait_until_or_explain(
        "every event of both sources processed and kept",
        Duration::from_secs(60),
        || async { processed(&pool, "sa").await == 20 && processed(&pool, "sb").await == 30 },
        explain,
    )
    .await;
    assert_eq!(common::read_deliveries(&events).len(), 50);
    wait_until_or_explain(
        "the cleaner to remove the expired rows of both sources",
        Duration::from_secs(60),
        || async { processed(&pool, "sa").await == 0 && processed(&pool, "sb").await == 0 },
        explain,
    )
    .await;
    assert_eq!(dead_letters(&pool, "sa").await, 1);
    assert_eq!(dead_letters(&pool, "sb").await, 1);
    let status = common::stop_gracefully(&mut relay.0, Duration::from_secs(30));
    assert!(
        status.is_some_and(|s| s.success()),
        "{}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
}
