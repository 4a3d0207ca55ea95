//! Producers in other languages: the programs in `examples/producers/`
//! (Go with pgx, Python with psycopg 3, Node.js with pg, Java with the
//! PostgreSQL JDBC driver) each write two orders' rows and events by plain
//! SQL, in their own process, while `outbox relay` runs as its own process
//! with a file publisher. Every committed event must arrive once, in its
//! order's order, with the payload's values exact (non-ASCII text, an
//! integer past 2^53, a nested object), the caller's `traceparent` in its
//! headers, and nothing from the transaction each program rolls back —
//! in the table mode, and again with the program's one switch set for the
//! WAL mode (`OUTBOX_MODE=wal`: `outbox_emit(...)` instead of an INSERT)
//! on a schema migrated with `outbox migrate --mode wal`.
//!
//! A language whose toolchain is missing is skipped with the reason;
//! `scripts/test` installs them all and sets
//! `OUTBOX_REQUIRE_PRODUCER_TOOLCHAINS`, which turns a skip into a failure.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// The orders table the programs write beside their events.
const ORDERS: &str = "CREATE TABLE orders (
    id          text   PRIMARY KEY,
    customer    text   NOT NULL,
    total_cents bigint NOT NULL,
    status      text   NOT NULL DEFAULT 'placed')";

/// Each program's per-order events, committed in this order.
const COMMITTED: [&str; 2] = ["order.created", "order.paid"];
/// Past 2^53: a JSON number a double cannot hold exactly.
const TOTAL_CENTS: u64 = 9_007_199_254_740_993;

#[derive(Clone, Copy, Debug)]
enum Lang {
    Go,
    Python,
    Node,
    Java,
}

impl Lang {
    fn name(self) -> &'static str {
        match self {
            Lang::Go => "go",
            Lang::Python => "python",
            Lang::Node => "node",
            Lang::Java => "java",
        }
    }
}

fn examples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/producers")
}

/// Whether `program` answers `version_arg` (Go spells it `go version`).
fn found(program: &str, version_arg: &str) -> bool {
    Command::new(program)
        .arg(version_arg)
        .output()
        .is_ok_and(|o| o.status.success())
}

fn run_ok(cmd: &mut Command, what: &str) {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("{what}: cannot start: {e}"));
    assert!(
        out.status.success(),
        "{what} failed: {}{}",
        common::text(&out.stdout),
        common::text(&out.stderr)
    );
}

/// The Debian jars the Java example runs with.
const JARS: [&str; 4] = [
    "/usr/share/java/postgresql.jar",
    "/usr/share/java/jackson-databind.jar",
    "/usr/share/java/jackson-core.jar",
    "/usr/share/java/jackson-annotations.jar",
];
/// Debian's pgx (golang-github-jackc-pgx-v4-dev), in GOPATH layout.
const GOCODE: &str = "/usr/share/gocode";

/// Builds `lang`'s program in `dir`: the command that runs it, or why it
/// cannot run here.
fn build(lang: Lang, dir: &Path) -> Result<Command, String> {
    let src = examples().join(lang.name());
    match lang {
        Lang::Go => {
            if !Path::new(GOCODE)
                .join("src/github.com/jackc/pgx/v4")
                .is_dir()
                || !found("go", "version")
            {
                return Err(
                    "needs go and pgx (Debian: golang-go golang-github-jackc-pgx-v4-dev)".into(),
                );
            }
            let pkg = dir.join("gopath/src/producer");
            std::fs::create_dir_all(&pkg).unwrap();
            std::fs::copy(src.join("main.go"), pkg.join("main.go")).unwrap();
            let exe = dir.join("producer-go");
            run_ok(
                Command::new("go")
                    .args(["build", "-o"])
                    .arg(&exe)
                    .arg(".")
                    .current_dir(&pkg)
                    .env("GO111MODULE", "off")
                    .env(
                        "GOPATH",
                        format!("{}:{GOCODE}", dir.join("gopath").display()),
                    ),
                "go build",
            );
            Ok(Command::new(exe))
        }
        Lang::Python => {
            let has = Command::new("python3")
                .args(["-c", "import psycopg"])
                .output()
                .is_ok_and(|o| o.status.success());
            if !has {
                return Err("needs python3 with psycopg 3 (pip install 'psycopg[binary]')".into());
            }
            let mut cmd = Command::new("python3");
            cmd.arg(src.join("producer.py"));
            Ok(cmd)
        }
        Lang::Node => {
            if !found("node", "--version") || !found("npm", "--version") {
                return Err("needs node and npm (Debian: nodejs npm)".into());
            }
            let app = dir.join("node");
            std::fs::create_dir_all(&app).unwrap();
            for f in ["package.json", "package-lock.json", "producer.js"] {
                std::fs::copy(src.join(f), app.join(f)).unwrap();
            }
            run_ok(
                Command::new("npm")
                    .args(["ci", "--no-audit", "--no-fund", "--loglevel=error"])
                    .current_dir(&app),
                "npm ci",
            );
            let mut cmd = Command::new("node");
            cmd.arg(app.join("producer.js"));
            Ok(cmd)
        }
        Lang::Java => {
            if !found("java", "--version") || JARS.iter().any(|j| !Path::new(j).exists()) {
                return Err(
                    "needs a JDK and the jars (Debian: default-jdk-headless libpostgresql-jdbc-java libjackson2-databind-java)"
                        .into(),
                );
            }
            let mut cmd = Command::new("java");
            cmd.arg("-cp")
                .arg(JARS.join(":"))
                .arg(src.join("Producer.java"));
            Ok(cmd)
        }
    }
}

/// `postgres://user@host:port/db` as the JDBC driver spells it.
fn jdbc_url(url: &str) -> String {
    let rest = url.strip_prefix("postgres://").expect("a postgres:// URL");
    let (user, at) = rest.split_once('@').expect("a user in the URL");
    let (user, password) = user.split_once(':').unwrap_or((user, ""));
    let mut jdbc = format!("jdbc:postgresql://{at}?user={user}");
    if !password.is_empty() {
        jdbc.push_str(&format!("&password={password}"));
    }
    jdbc
}

/// A W3C `traceparent` of the caller writing `order`, one per order.
fn traceparent(order: &str) -> String {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    order.hash(&mut h);
    let h = h.finish() | 1;
    format!(
        "00-{h:016x}{:016x}-{:016x}-01",
        h.rotate_left(17),
        h ^ 0x5a5a
    )
}

fn expected_payload(order: &str, event_type: &str) -> Value {
    match event_type {
        "order.created" => json!({
            "order_id": order,
            "customer": "Zoë Ålesund — 東京 🚚",
            "total_cents": TOTAL_CENTS,
            "lines": [{"sku": "A-1", "qty": 2, "attrs": {"gift": true, "note": "say \"hi\" \\ bye"}}],
        }),
        "order.paid" => json!({"order_id": order, "paid_cents": TOTAL_CENTS}),
        other => panic!("no payload is expected for {other}"),
    }
}

fn delivered(file: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(file).unwrap_or_default();
    let complete = text.rfind('\n').map_or("", |end| &text[..=end]);
    complete
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("corrupt line {l:?}: {e}")))
        .collect()
}

async fn producer_events_arrive_once_in_order_and_exact(lang: Lang) {
    let dir = tempfile::tempdir().unwrap();
    let mut program = match build(lang, dir.path()) {
        Ok(cmd) => cmd,
        Err(why) if std::env::var_os("OUTBOX_REQUIRE_PRODUCER_TOOLCHAINS").is_some() => {
            panic!("the {} producer cannot run here: {why}", lang.name())
        }
        Err(why) => {
            eprintln!("skipped: the {} producer {why}", lang.name());
            return;
        }
    };
    // The same program in both delivery modes, behind its one switch.
    let (db, pool, _files, file) = common::db_and_events_file().await;
    program.env_remove("OUTBOX_MODE");
    deliveries_once_in_order_and_exact(lang, &mut program, &db.url, &pool, &file).await;
    let (url, pool, _files, file) = wal_database().await;
    program.env("OUTBOX_MODE", "wal");
    deliveries_once_in_order_and_exact(lang, &mut program, &url, &pool, &file).await;
    let rows: i64 = sqlx::query_scalar("SELECT count(*) FROM outbox_events")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(rows, 0, "the WAL mode stored no row");
}

/// One cluster with `wal_level = logical` for the WAL mode's runs.
static LOGICAL: std::sync::OnceLock<outbox_testkit::postgres::PgCluster> =
    std::sync::OnceLock::new();

/// A database on the logical cluster, migrated with `outbox migrate --mode
/// wal` (its slot named after it: slot names are server-wide), and a file
/// for the relay.
async fn wal_database() -> (String, sqlx::PgPool, tempfile::TempDir, PathBuf) {
    if LOGICAL.get().is_none() {
        let cluster =
            tokio::task::spawn_blocking(|| outbox_testkit::postgres::logical_cluster(&[]))
                .await
                .unwrap();
        let _ = LOGICAL.set(cluster);
    }
    let cluster = LOGICAL.get().unwrap();
    let name = format!("p_{:016x}", rand::random::<u64>());
    let admin = sqlx::PgPool::connect(&cluster.url()).await.unwrap();
    sqlx::query(&format!("CREATE DATABASE {name}"))
        .execute(&admin)
        .await
        .unwrap();
    let url = cluster.url_for(&name);
    let out = common::run(
        &[
            "migrate",
            "--mode",
            "wal",
            "--slot",
            &format!("outbox_{name}"),
        ],
        Some(&url),
    );
    assert!(out.status.success(), "{}", common::text(&out.stderr));
    let pool = sqlx::PgPool::connect(&url).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("events.jsonl");
    (url, pool, dir, file)
}

async fn deliveries_once_in_order_and_exact(
    lang: Lang,
    program: &mut Command,
    url: &str,
    pool: &sqlx::PgPool,
    file: &Path,
) {
    sqlx::query(ORDERS).execute(pool).await.unwrap();
    let mut relay = common::spawn_relay(url, file, "producers", &[]);

    // Two orders, written by two processes at once.
    let orders: Vec<String> = (1..=2).map(|n| format!("{}-{n}", lang.name())).collect();
    let children: Vec<_> = orders
        .iter()
        .map(|order| {
            program
                .env("DATABASE_URL", url)
                .env("JDBC_URL", jdbc_url(url))
                .env("ORDER_ID", order)
                .env("TRACEPARENT", traceparent(order))
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .expect("start the producer")
        })
        .collect();
    for (order, child) in orders.iter().zip(children) {
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "the {} producer failed for {order}: {}",
            lang.name(),
            common::text(&out.stderr)
        );
        assert_eq!(
            common::text(&out.stdout).trim(),
            format!("order {order} placed and paid; its cancellation rolled back")
        );
    }

    let want = orders.len() * COMMITTED.len();
    let deadline = Instant::now() + Duration::from_secs(30);
    while delivered(file).len() < want {
        assert!(
            Instant::now() < deadline,
            "the relay delivered {} of {want} events in 30 s",
            delivered(file).len()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Time for anything that should not be there to show up too.
    tokio::time::sleep(Duration::from_millis(500)).await;
    relay.kill().ok();
    relay.wait().ok();

    let lines = delivered(file);
    assert_eq!(lines.len(), want, "each committed event once: {lines:#?}");
    let mut ids: Vec<&str> = lines.iter().map(|l| l["id"].as_str().unwrap()).collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), want, "no event delivered twice");
    for order in &orders {
        let mine: Vec<&Value> = lines
            .iter()
            .filter(|l| l["aggregate_id"] == order.as_str())
            .collect();
        let types: Vec<&str> = mine
            .iter()
            .map(|l| l["event_type"].as_str().unwrap())
            .collect();
        assert_eq!(
            types, COMMITTED,
            "{order}: committed events, in order, and no rolled-back one"
        );
        for line in mine {
            let event_type = line["event_type"].as_str().unwrap();
            assert_eq!(line["aggregate_type"], "order");
            assert_eq!(
                line["payload"],
                expected_payload(order, event_type),
                "{order} {event_type}"
            );
            assert_eq!(
                line["headers"]["traceparent"],
                traceparent(order).as_str(),
                "{order} {event_type}: the caller's trace context"
            );
        }
    }
    let statuses: Vec<String> = sqlx::query_scalar("SELECT status FROM orders ORDER BY id")
        .fetch_all(pool)
        .await
        .unwrap();
    assert_eq!(statuses, ["paid", "paid"], "the cancellations rolled back");
    let pending: i64 =
        sqlx::query_scalar("SELECT count(*) FROM outbox_events WHERE processed_at IS NULL")
            .fetch_one(pool)
            .await
            .unwrap();
    assert_eq!(pending, 0, "nothing left behind");
}

#[tokio::test]
async fn a_go_service_with_pgx_has_each_committed_event_delivered_once_in_order_and_exact() {
    producer_events_arrive_once_in_order_and_exact(Lang::Go).await;
}

#[tokio::test]
async fn a_python_service_with_psycopg_has_each_committed_event_delivered_once_in_order_and_exact()
{
    producer_events_arrive_once_in_order_and_exact(Lang::Python).await;
}

#[tokio::test]
async fn a_node_service_with_pg_has_each_committed_event_delivered_once_in_order_and_exact() {
    producer_events_arrive_once_in_order_and_exact(Lang::Node).await;
}

#[tokio::test]
async fn a_java_service_with_jdbc_has_each_committed_event_delivered_once_in_order_and_exact() {
    producer_events_arrive_once_in_order_and_exact(Lang::Java).await;
}

#[test]
fn jdbc_urls_carry_the_user_and_password() {
    assert_eq!(
        jdbc_url("postgres://outbox@127.0.0.1:5432/t_1"),
        "jdbc:postgresql://127.0.0.1:5432/t_1?user=outbox"
    );
    assert_eq!(
        jdbc_url("postgres://u:p@h:1/d"),
        "jdbc:postgresql://h:1/d?user=u&password=p"
    );
}
