//! `outbox status` and the dead-letter commands over `[[source]]` entries,
//! run as a program against a real PostgreSQL: two schemas of one database
//! as sources `a` and `b`, and a pattern entry `tenants` that finds the
//! migrated `tenant_*` schemas.

mod common;

use std::path::{Path, PathBuf};
use std::process::Output;

use outbox_testkit::postgres::{test_db, TestDb};
use sqlx::PgPool;

/// The config file: sources `a` (schema `sa`), `b` (schema `sb`) and
/// `tenants` (`tenant_*`), on the database `DATABASE_URL` names, followed
/// by `more`.
fn config(dir: &Path, more: &str) -> PathBuf {
    let path = dir.join("outbox.toml");
    std::fs::write(
        &path,
        format!(
            "[[source]]\nname = \"a\"\nschema = \"sa\"\n\n\
             [[source]]\nname = \"b\"\nschema = \"sb\"\n\n\
             [[source]]\nname = \"tenants\"\nschemas = \"tenant_*\"\n{more}"
        ),
    )
    .unwrap();
    path
}

/// `outbox --config FILE ARGS` with `DATABASE_URL` set to the test
/// database.
fn run(db: &TestDb, file: &Path, args: &[&str]) -> Output {
    let mut all = vec!["--config", file.to_str().unwrap()];
    all.extend_from_slice(args);
    common::run(&all, Some(&db.url))
}

/// [`run`], which must succeed: its stdout.
fn ok(db: &TestDb, file: &Path, args: &[&str]) -> String {
    let out = run(db, file, args);
    assert!(
        out.status.success(),
        "{args:?} failed: {}",
        common::text(&out.stderr)
    );
    common::text(&out.stdout)
}

/// [`run`], which must fail: its stderr.
fn refused(db: &TestDb, file: &Path, args: &[&str]) -> String {
    let out = run(db, file, args);
    assert!(
        !out.status.success(),
        "{args:?} succeeded: {}",
        common::text(&out.stdout)
    );
    common::text(&out.stderr)
}

/// Inserts `pending` live events and `dead` dead-lettered ones into
/// `schema`.
async fn insert(pool: &PgPool, schema: &str, pending: i64, dead: i64) {
    sqlx::query(&format!(
        "INSERT INTO {schema}.outbox_events
             (aggregate_type, aggregate_id, event_type, payload, attempts, last_error,
              dead_lettered_at)
         SELECT 'order', '{schema}-' || n, 'created', '{{}}'::jsonb,
                CASE WHEN n > $1 THEN 10 ELSE 0 END,
                CASE WHEN n > $1 THEN 'broker said no' END,
                CASE WHEN n > $1 THEN now() - interval '1 hour' END
         FROM generate_series(1, $1 + $2) AS n"
    ))
    .bind(pending)
    .bind(dead)
    .execute(pool)
    .await
    .unwrap();
}

/// A database with schemas `sa` (2 pending, 1 dead), `sb` (1 pending, 2
/// dead), `tenant_1` (3 pending, 0 dead), all migrated by `outbox migrate
/// --schema`, and `tenant_2` created but not migrated.
async fn setup() -> (TestDb, PgPool) {
    let db = test_db().await;
    for schema in ["sa", "sb", "tenant_1"] {
        let out = common::run(&["migrate", "--schema", schema], Some(&db.url));
        assert!(out.status.success(), "{}", common::text(&out.stderr));
    }
    let pool = db.pool().await;
    sqlx::query("CREATE SCHEMA tenant_2")
        .execute(&pool)
        .await
        .unwrap();
    insert(&pool, "sa", 2, 1).await;
    insert(&pool, "sb", 1, 2).await;
    insert(&pool, "tenant_1", 3, 0).await;
    (db, pool)
}

/// The row of `source` in `status` output, split at runs of spaces.
fn row<'a>(text: &'a str, source: &str) -> Option<Vec<&'a str>> {
    text.lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .find(|cells| cells.first() == Some(&source))
}

#[tokio::test]
async fn status_reads_the_source_named_or_every_source_with_its_name_first() {
    let (db, _pool) = setup().await;
    let dir = tempfile::tempdir().unwrap();
    let file = config(dir.path(), "");

    let one = ok(&db, &file, &["status", "--source", "a"]);
    let a = row(&one, "a").unwrap_or_else(|| panic!("{one}"));
    assert_eq!(&a[1..4], ["sa", "2", "0"], "{one}");
    assert!(row(&one, "b").is_none(), "only a: {one}");
    assert!(row(&one, "tenants/tenant_1").is_none(), "only a: {one}");

    let all = ok(&db, &file, &["status"]);
    let header = all.lines().next().unwrap();
    assert!(header.starts_with("SOURCE"), "{all}");
    assert_eq!(&row(&all, "a").unwrap()[1..3], ["sa", "2"], "{all}");
    assert_eq!(&row(&all, "b").unwrap()[1..3], ["sb", "1"], "{all}");
    assert_eq!(
        &row(&all, "tenants/tenant_1").unwrap()[1..3],
        ["tenant_1", "3"],
        "a migrated schema the pattern matches: {all}"
    );
    assert!(
        !all.contains("tenant_2"),
        "a schema without the outbox tables is no source: {all}"
    );

    let json = ok(
        &db,
        &file,
        &["status", "--json", "--source", "tenants/tenant_1"],
    );
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v[0]["source"], "tenants/tenant_1", "{json}");
    assert_eq!(v[0]["pending"], 3, "{json}");
    assert_eq!(v.as_array().unwrap().len(), 1, "{json}");

    let e = refused(&db, &file, &["status", "--source", "c"]);
    for name in ["\"c\"", "a, b, tenants or tenants/SCHEMA"] {
        assert!(e.contains(name), "{e}");
    }
    let e = refused(&db, &file, &["status", "--schema", "sa"]);
    assert!(e.contains("--schema") && e.contains("--source NAME"), "{e}");
    let e = refused(&db, &file, &["status", "--source", "tenants/tenant_2"]);
    assert!(
        e.contains("tenant_2") && e.contains("outbox migrate"),
        "{e}"
    );
}

#[tokio::test]
async fn a_source_whose_database_is_down_shows_its_error_and_the_others_still_print() {
    let (db, _pool) = setup().await;
    let dir = tempfile::tempdir().unwrap();
    // Port 1: nothing listens there.
    let file = config(
        dir.path(),
        "\n[[source]]\nname = \"down\"\ndatabase_url = \"postgres://u:hunter2@127.0.0.1:1/x\"\nschema = \"public\"\n",
    );
    let out = run(&db, &file, &["status"]);
    let text = common::text(&out.stdout);
    assert!(!out.status.success(), "a source is down: {text}");
    assert_eq!(&row(&text, "a").unwrap()[1..3], ["sa", "2"], "{text}");
    assert_eq!(&row(&text, "b").unwrap()[1..3], ["sb", "1"], "{text}");
    let down = row(&text, "down").unwrap_or_else(|| panic!("{text}"));
    assert_eq!(down[1], "error:", "{text}");
    assert!(text.contains("127.0.0.1:1"), "{text}");
    assert!(!text.contains("hunter2"), "{text}");
}

#[tokio::test]
async fn dead_letters_are_listed_per_source_and_changed_only_in_the_source_named() {
    let (db, pool) = setup().await;
    let dir = tempfile::tempdir().unwrap();
    let file = config(dir.path(), "");

    let list = ok(&db, &file, &["dead-letters", "list"]);
    let header: Vec<&str> = list.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(&header[..2], ["SOURCE", "ID"], "{list}");
    let sources: Vec<&str> = list
        .lines()
        .skip(1)
        .filter_map(|l| l.split_whitespace().next())
        .filter(|s| ["a", "b"].contains(s))
        .collect();
    assert_eq!(sources, ["a", "b", "b"], "{list}");
    assert!(list.contains("3 dead letters"), "{list}");

    let json = ok(
        &db,
        &file,
        &["dead-letters", "list", "--json", "--source", "b"],
    );
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    let items = v.as_array().unwrap();
    assert_eq!(items.len(), 2, "{json}");
    assert!(items.iter().all(|d| d["source"] == "b"), "{json}");

    let e = refused(&db, &file, &["dead-letters", "retry", "--all"]);
    assert!(
        e.contains("--source") && e.contains("a, b, tenants/tenant_1"),
        "{e}"
    );
    let e = refused(
        &db,
        &file,
        &["dead-letters", "discard", "--all", "--dry-run"],
    );
    assert!(e.contains("--source"), "{e}");

    let done = ok(
        &db,
        &file,
        &["dead-letters", "retry", "--all", "--source", "b"],
    );
    assert!(
        done.contains("retried 2 dead letters in source b"),
        "{done}"
    );
    let dead = |schema: &'static str| {
        let pool = pool.clone();
        async move {
            sqlx::query_scalar::<_, i64>(&format!(
                "SELECT count(*) FROM {schema}.outbox_events WHERE dead_lettered_at IS NOT NULL"
            ))
            .fetch_one(&pool)
            .await
            .unwrap()
        }
    };
    assert_eq!(dead("sb").await, 0, "b's dead letters were retried");
    assert_eq!(dead("sa").await, 1, "a's were left alone");
}

#[tokio::test]
async fn a_bad_source_entry_stops_every_command_naming_it() {
    let (db, _pool) = setup().await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.toml");
    std::fs::write(
        &path,
        "[[source]]\nname = \"a\"\nschema = \"sa\"\nschemas = \"s*\"\n",
    )
    .unwrap();
    for args in [
        &["status"][..],
        &["dead-letters", "list"],
        &["config", "check"],
    ] {
        let e = refused(&db, &path, args);
        assert!(
            e.contains("source[1].schema") && e.contains("schemas = \"s*\""),
            "{args:?}: {e}"
        );
        assert_eq!(e.lines().count(), 1, "{e}");
    }
}

#[tokio::test]
async fn without_sources_source_is_refused_and_nothing_else_changes() {
    let (db, _pool) = setup().await;
    for args in [
        &["status", "--schema", "sa", "--source", "a"][..],
        &["dead-letters", "list", "--schema", "sa", "--source", "a"],
        &[
            "dead-letters",
            "retry",
            "--all",
            "--schema",
            "sa",
            "--source",
            "a",
        ],
    ] {
        let out = common::run(args, Some(&db.url));
        let e = common::text(&out.stderr);
        assert!(!out.status.success(), "{args:?}");
        assert!(
            e.contains("--source \"a\"") && e.contains("[[source]]"),
            "{e}"
        );
    }
    let out = common::run(&["status", "--schema", "sa"], Some(&db.url));
    let text = common::text(&out.stdout);
    assert!(out.status.success(), "{}", common::text(&out.stderr));
    assert!(
        text.starts_with("schema:         sa\npending:        2\n"),
        "the one-schema form as before: {text}"
    );
}

/// `outbox --config FILE relay --drain --publisher file:OUT` on the test
/// database, stopped (and the test failed) if it runs for over a minute:
/// its exit status and stderr.
async fn drain_within_a_minute(
    db: &TestDb,
    file: &Path,
    out: &Path,
) -> (std::process::ExitStatus, String) {
    let mut cmd = common::bin();
    cmd.env("DATABASE_URL", &db.url)
        .args(["--config", file.to_str().unwrap()])
        .args(["relay", "--drain", "--publisher"])
        .arg(format!("file:{}", out.display()))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped());
    let child = tokio::process::Command::from(cmd)
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let out = tokio::time::timeout(std::time::Duration::from_secs(60), child.wait_with_output())
        .await
        .expect("relay --drain still running after a minute")
        .unwrap();
    (out.status, common::text(&out.stderr))
}

/// An entry whose schema has no outbox tables can never drain: `relay
/// --drain` stops with an error naming the entry and the fix instead of
/// checking again every second for ever.
#[tokio::test]
async fn drain_over_sources_exits_non_zero_naming_an_unmigrated_entry() {
    let (db, _pool) = setup().await;
    let dir = tempfile::tempdir().unwrap();
    let file = config(
        dir.path(),
        "\n[[source]]\nname = \"late\"\nschema = \"tenant_2\"\n",
    );
    let out = dir.path().join("events.jsonl");
    let (status, stderr) = drain_within_a_minute(&db, &file, &out).await;
    assert!(!status.success(), "exited {status}: {stderr}");
    let error = stderr
        .lines()
        .find(|l| l.starts_with("error: "))
        .unwrap_or_else(|| panic!("no error line: {stderr}"));
    assert!(
        error.contains("source late")
            && error.contains("tenant_2")
            && error.contains("outbox migrate --schema tenant_2"),
        "{error}"
    );
    assert!(
        !stderr.contains("does not exist: relation"),
        "a database message doubled: {stderr}"
    );
}

/// A config file of two entries, `a` on `url_a` and `b` on `url_b`.
fn two_entries(dir: &Path, a: (&str, &str), b: (&str, &str)) -> PathBuf {
    let path = dir.join("two.toml");
    let entry = |name: &str, (url, selector): (&str, &str)| {
        format!("[[source]]\nname = \"{name}\"\ndatabase_url = \"{url}\"\n{selector}\n\n")
    };
    std::fs::write(&path, entry("a", a) + &entry("b", b)).unwrap();
    path
}

/// Two `schema` entries reaching one schema of one database through two
/// spellings of its URL delivered every event twice: `config check` and
/// `relay` refuse them, naming both entries.
#[tokio::test]
async fn two_entries_for_one_schema_through_two_spellings_of_its_database_are_refused() {
    let (db, _pool) = setup().await;
    let dir = tempfile::tempdir().unwrap();
    let localhost = db.url.replacen("@127.0.0.1:", "@localhost:", 1);
    assert_ne!(localhost, db.url);
    let slow = format!("{}?connect_timeout=9", db.url);
    for other in [slow.as_str(), localhost.as_str(), db.url.as_str()] {
        let file = two_entries(
            dir.path(),
            (&db.url, "schema = \"sa\""),
            (other, "schema = \"sa\""),
        );
        for args in [&["config", "check"][..], &["relay", "--drain"]] {
            let e = refused(&db, &file, args);
            assert!(
                e.contains("source[2].schema")
                    && e.contains("source \"b\" and source[1] \"a\"")
                    && e.contains("schema sa")
                    && e.contains("remove one of the two entries"),
                "{other} {args:?}: {e}"
            );
            assert_eq!(e.lines().count(), 1, "{e}");
        }
    }
    // Another schema of the same database is another source.
    let file = two_entries(
        dir.path(),
        (&db.url, "schema = \"sa\""),
        (&slow, "schema = \"sb\""),
    );
    ok(&db, &file, &["config", "check"]);
}

/// A pattern entry and a `schema` entry on two spellings of one database
/// share one pool: the schema both reach is served once, every event
/// delivered once.
#[tokio::test]
async fn a_pattern_and_a_schema_through_two_spellings_of_one_database_deliver_once() {
    let (db, pool) = setup().await;
    let dir = tempfile::tempdir().unwrap();
    let slow = format!("{}?connect_timeout=9", db.url);
    let file = two_entries(
        dir.path(),
        (&db.url, "schema = \"sa\""),
        (&slow, "schemas = \"s?\""),
    );
    insert(&pool, "sa", 100, 0).await;
    let out = dir.path().join("events.jsonl");
    let (status, stderr) = drain_within_a_minute(&db, &file, &out).await;
    assert!(status.success(), "{stderr}");
    let lines = std::fs::read_to_string(&out).unwrap();
    let ids: Vec<String> = lines
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["id"].to_string())
        .collect();
    let unique: std::collections::HashSet<&String> = ids.iter().collect();
    // sa: 2 + 100 pending; sb: 1 pending (the pattern's); dead letters stay.
    assert_eq!(unique.len(), 103, "{stderr}");
    assert_eq!(ids.len(), unique.len(), "delivered twice: {stderr}");
}
