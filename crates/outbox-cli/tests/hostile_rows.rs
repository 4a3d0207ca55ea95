//! Odd rows written by plain SQL, run through the program as users run it:
//! `outbox relay` delivers every payload as stored and dead-letters what no
//! client can read, the operator commands read the same rows, and a schema
//! dropped under a running relay is named once, with the fix.

mod common;

use std::io::{BufRead, BufReader};
use std::process::Output;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use outbox_testkit::conformance::{HOSTILE_HEADERS, HOSTILE_PAYLOADS};
use outbox_testkit::postgres::{test_db, TestDb};
use sqlx::PgPool;

fn assert_ok(args: &[&str], out: &Output) {
    assert!(
        out.status.success(),
        "outbox {args:?} failed ({:?}): {}",
        out.status.code(),
        common::text(&out.stderr)
    );
    assert!(
        !common::text(&out.stderr).contains("panicked"),
        "{}",
        common::text(&out.stderr)
    );
}

/// Every operator command that reads the outbox; each must succeed.
const OPERATOR_COMMANDS: &[&[&str]] = &[
    &["status"],
    &["status", "--json"],
    &["dead-letters", "list"],
    &["dead-letters", "list", "--json"],
    &["dead-letters", "retry", "--all", "--dry-run"],
    &["dead-letters", "discard", "--all", "--dry-run"],
    &["cleanup", "--older-than", "1s"],
];

fn run_operator_commands(db: &TestDb) {
    for args in OPERATOR_COMMANDS {
        let out = common::run(args, Some(&db.url));
        assert_ok(args, &out);
    }
}

async fn migrated() -> (TestDb, PgPool) {
    let db = test_db().await;
    let out = common::run(&["migrate"], Some(&db.url));
    assert_ok(&["migrate"], &out);
    let pool = db.pool().await;
    (db, pool)
}

/// Inserts rows as they could be written before migration 2 refused
/// unreadable timestamps (migrations 2, 9 and 11 put the checks back
/// unvalidated).
async fn insert_legacy(pool: &PgPool, sql: &str) {
    sqlx::raw_sql(&format!(
        "BEGIN;
         ALTER DOMAIN outbox_time DROP CONSTRAINT outbox_events_finite_times;
         ALTER TABLE outbox_events DROP CONSTRAINT outbox_events_row;
         {sql}
         DELETE FROM outbox_schema_migrations WHERE version IN (2, 9, 11);
         COMMIT;"
    ))
    .execute(pool)
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relay_to_a_file_keeps_every_payload_and_outlives_unreadable_rows() {
    let (db, pool) = migrated().await;
    let mut sql = String::new();
    let mut expected = Vec::new();
    for (i, (_, payload)) in HOSTILE_PAYLOADS.iter().enumerate() {
        sql.push_str(&format!(
            "INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload)
             VALUES ('order', 'p{i}', 'odd', {payload});"
        ));
    }
    for (i, (_, headers)) in HOSTILE_HEADERS.iter().enumerate() {
        sql.push_str(&format!(
            "INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload, headers)
             VALUES ('order', 'h{i}', 'odd', '{{}}', {headers});"
        ));
    }
    for at in ["infinity", "-infinity", "294276-01-01"] {
        sql.push_str(&format!(
            "INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload, created_at)
             VALUES ('order', 'bad', 'unreadable', '{{}}', '{at}');"
        ));
    }
    insert_legacy(&pool, &sql).await;
    let migrate = common::run(&["migrate"], Some(&db.url));
    assert_ok(&["migrate"], &migrate);
    assert!(common::text(&migrate.stdout).contains("0002_finite_timestamps"));
    let rows: Vec<(uuid::Uuid, String, String)> = sqlx::query_as(
        "SELECT id, payload::text, headers::text FROM outbox_events
         WHERE event_type = 'odd' ORDER BY seq",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    expected.extend(rows);

    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("out.jsonl");
    let spec = format!("file:{}", file.display());
    let args = ["relay", "--drain", "--publisher", spec.as_str()];
    let out = common::run(&args, Some(&db.url));
    assert_ok(&args, &out);

    let written = std::fs::read_to_string(&file).unwrap();
    let expected: Vec<(uuid::Uuid, String, usize)> = expected
        .into_iter()
        .map(|(id, payload, headers)| {
            let stored: std::collections::BTreeMap<String, Box<serde_json::value::RawValue>> =
                serde_json::from_str(&headers).unwrap();
            (id, payload, stored.len())
        })
        .collect();
    common::assert_lines_as_stored(written.lines(), &expected, "readable event");
    let dead: i64 = sqlx::query_scalar("SELECT count(*) FROM outbox_dead_letters")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(dead, 3, "each unreadable row dead-lettered alone");
    let stderr = common::text(&out.stderr);
    assert_eq!(
        stderr.matches("undecodable row").count(),
        3,
        "each unreadable row is logged once: {stderr}"
    );

    // The operator commands read the same rows.
    run_operator_commands(&db);
    let list = common::run(&["dead-letters", "list", "--json"], Some(&db.url));
    let v: serde_json::Value = serde_json::from_slice(&list.stdout).unwrap();
    assert_eq!(v.as_array().map(Vec::len), Some(3), "{v}");
}

/// Text written by anyone (here a producer's aggregate id and event type)
/// cannot forge or colour a log line: the text log escapes control
/// characters in every field.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn control_characters_in_logged_fields_cannot_forge_log_lines() {
    let (db, pool) = migrated().await;
    // Unreadable, so it is dead-lettered and logged with its ids.
    insert_legacy(
        &pool,
        "INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload, created_at)
         VALUES ('order', E'x\\nforged line\\u001b[31m', E'odd\\rtype', '{}', 'infinity');",
    )
    .await;
    let migrate = common::run(&["migrate"], Some(&db.url));
    assert_ok(&["migrate"], &migrate);
    let dir = tempfile::tempdir().unwrap();
    let spec = format!("file:{}", dir.path().join("out.jsonl").display());
    let args = ["relay", "--drain", "--publisher", spec.as_str()];
    let out = common::run(&args, Some(&db.url));
    assert_ok(&args, &out);
    let stderr = common::text(&out.stderr);
    assert!(stderr.contains("event dead-lettered"), "{stderr}");
    assert!(
        !stderr.contains('\u{1b}'),
        "an escape sequence passed: {stderr:?}"
    );
    assert!(
        !stderr.contains('\r'),
        "a carriage return passed: {stderr:?}"
    );
    let record = stderr
        .lines()
        .find(|l| l.contains("event dead-lettered"))
        .unwrap();
    assert!(
        record.contains("x\\nforged line") && record.contains("error=undecodable row"),
        "the record is one line, its newline shown escaped: {stderr:?}"
    );
    assert!(
        !stderr.lines().any(|l| l.starts_with("forged")),
        "a forged line: {stderr:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operator_commands_read_unreadable_times_of_every_column() {
    let (db, pool) = migrated().await;
    let mut sql = String::new();
    for at in ["infinity", "-infinity", "294276-01-01"] {
        sql.push_str(&format!(
            "INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload, created_at)
             VALUES ('order', 'pending', 'x', '{{}}', '{at}');
             INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload,
                                        attempts, last_error, dead_lettered_at)
             VALUES ('order', 'dead', 'x', '{{}}', 1, 'boom', '{at}');
             INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload,
                                        processed_at)
             VALUES ('order', 'done', 'x', '{{}}', '{at}');"
        ));
    }
    insert_legacy(&pool, &sql).await;
    run_operator_commands(&db);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schema_dropped_under_a_running_relay_is_named_once_with_the_fix() {
    let (db, pool) = migrated().await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("out.jsonl");
    let mut relay = KillOnDrop(common::spawn_relay(&db.url, &file, "dropped", &[]));
    let (tx, rx) = mpsc::channel::<String>();
    let stderr = relay.0.stderr.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let wait_for = |what: &str, deadline: Duration| -> Vec<String> {
        let start = Instant::now();
        let mut seen = Vec::new();
        while start.elapsed() < deadline {
            if let Ok(line) = rx.recv_timeout(Duration::from_millis(100)) {
                let hit = line.contains(what);
                seen.push(line);
                if hit {
                    return seen;
                }
            }
        }
        panic!("no log line with {what:?} within {deadline:?}: {seen:#?}");
    };
    wait_for("relay running", Duration::from_secs(30));
    sqlx::query("DROP SCHEMA public CASCADE")
        .execute(&pool)
        .await
        .unwrap();
    sqlx::query("CREATE SCHEMA public")
        .execute(&pool)
        .await
        .unwrap();
    let seen = wait_for("outbox migrate", Duration::from_secs(30));
    let named = seen.last().unwrap();
    assert!(
        named.contains("public.outbox_") && named.contains("does not exist"),
        "the line names the missing table: {named}"
    );
    // Two seconds of failing rounds later, still said only once per loop.
    std::thread::sleep(Duration::from_secs(2));
    let later: Vec<String> = rx.try_iter().collect();
    let repeats = later
        .iter()
        .filter(|l| l.contains("outbox migrate"))
        .count();
    assert!(
        repeats <= 1,
        "the missing table is named once per change: {later:#?}"
    );

    let out = common::run(&["migrate"], Some(&db.url));
    assert_ok(&["migrate"], &out);
    wait_for("tables are back", Duration::from_secs(30));
    drop(relay);
}

/// A child relay that is killed when the test ends, failed or not.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
