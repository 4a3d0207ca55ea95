//! What a relay of many sources (`[[source]]` entries) serves beside the
//! delivery, as the relay of one source does, with `outbox relay` as its own
//! process against a real PostgreSQL: the cleaner in retention mode, in
//! every source's schema, and the web console of the source
//! `--console-source` names (refused at start when that name is missing,
//! unknown or names many schemas).

mod common;
mod console_support;

use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::Duration;

use console_support::client;
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

/// `outbox --config FILE relay --publisher stdout --console ARGS`, whose
/// start must be refused: its one error line.
fn refused(db: &TestDb, file: &Path, args: &[&str]) -> String {
    let out = common::bin()
        .env("DATABASE_URL", &db.url)
        .env_remove("OUTBOX_CONSOLE_PASSWORD")
        .args(["--config", file.to_str().unwrap()])
        .args([
            "relay",
            "--publisher",
            "stdout",
            "--http-addr",
            "127.0.0.1:0",
        ])
        .arg("--console")
        .args(args)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", common::text(&out.stderr));
    common::one_error_line(&out)
}

/// `--console-source` picks the source whose tables the console shows: an
/// entry naming one schema, or `ENTRY/SCHEMA` of a pattern entry; a
/// missing, unknown or ambiguous choice is refused at start in one line
/// naming the flag, the value and the entries.
#[tokio::test]
async fn a_relay_of_many_sources_serves_the_console_of_the_source_named() {
    let (db, pool) = setup().await;
    insert(&pool, "sa", 0).await;
    insert(&pool, "sb", 0).await;
    insert(&pool, "tenant_1", 0).await;
    let dir = tempfile::tempdir().unwrap();
    let tenants = "\n[[source]]\nname = \"tenants\"\nschemas = \"tenant_*\"\n";
    let file = config(dir.path(), &db, "", tenants);
    let entries = "a, b, tenants or tenants/SCHEMA";

    let e = refused(&db, &file, &[]);
    assert!(
        e.contains("--console-source NAME") && e.contains(entries),
        "{e}"
    );
    let e = refused(&db, &file, &["--console-source", "c"]);
    assert!(
        e.contains("--console-source") && e.contains("\"c\"") && e.contains(entries),
        "{e}"
    );
    let e = refused(&db, &file, &["--console-source", "tenants"]);
    assert!(e.contains("--console-source tenants/SCHEMA"), "{e}");
    let e = refused(&db, &file, &["--console-source", "tenants/tenant_9"]);
    assert!(
        e.contains("--console-source")
            && e.contains("tenant_9")
            && e.contains("outbox migrate --schema"),
        "{e}"
    );
    let out = common::bin()
        .args(["--config", file.to_str().unwrap()])
        .args(["relay", "--console-source", "b"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "a usage error");
    assert!(common::text(&out.stderr).contains("--console"));

    for (source, shown, hidden) in [
        ("b", "sb-dl", "sa-dl"),
        ("tenants/tenant_1", "tenant_1-dl", "sb-dl"),
    ] {
        signed_in_console_lists(&db, &file, source, shown, hidden).await;
    }
}

/// A relay of the sources in `file` serving the console of `source` with a
/// password: its events page asks for the password, then, signed in, lists
/// `shown` and not `hidden`.
async fn signed_in_console_lists(
    db: &TestDb,
    file: &Path,
    source: &str,
    shown: &str,
    hidden: &str,
) {
    let port = outbox_testkit::process::free_port();
    let relay = common::bin()
        .env("DATABASE_URL", &db.url)
        .env("OUTBOX_CONSOLE_PASSWORD", "correct horse")
        .args(["--config", file.to_str().unwrap()])
        .args(["relay", "--publisher", "stdout", "--console"])
        .args(["--console-source", source])
        .args(["--http-addr", &format!("127.0.0.1:{port}")])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let _relay = Killed(relay);
    let base = format!("http://127.0.0.1:{port}");
    let c = client();
    outbox_testkit::wait_until("the relay's console", Duration::from_secs(30), || {
        let (c, url) = (c.clone(), format!("{base}/login"));
        async move { c.get(url).send().await.is_ok_and(|r| r.status() == 200) }
    })
    .await;
    let events = format!("{base}/events?aggregate_type=order");
    let r = c.get(&events).send().await.unwrap();
    assert_eq!(
        (
            r.status().as_u16(),
            r.headers()["location"].to_str().unwrap()
        ),
        (303, "/login"),
        "{source}"
    );
    let r = c
        .post(format!("{base}/login"))
        .form(&[("password", "correct horse")])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 303, "{source}");
    let r = c.get(&events).send().await.unwrap();
    assert_eq!(r.status(), 200, "{source}");
    let page = r.text().await.unwrap();
    assert!(page.contains(shown), "{source}: {page}");
    assert!(!page.contains(hidden), "{source}: {page}");
    let (status, _) = common::http_get(port, "/readyz").await.unwrap();
    assert!(
        status == 200 || status == 503,
        "the relay's own probe: {status}"
    );
}
