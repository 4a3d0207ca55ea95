//! `outbox relay` behind a real PgBouncer (Debian's package, started here
//! on a free port in front of the test's PostgreSQL). In session pooling it
//! delivers everything; in transaction pooling it stops at start saying
//! what is wrong and what to do, instead of failing on a prepared
//! statement's name; `outbox migrate` and plain-SQL producers still work
//! through the transaction pool.

mod common;
mod deploy_support;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use deploy_support::tool;
use outbox_testkit::process::free_port;

/// A PgBouncer in `mode` in front of the server of `url`, stopped on drop.
struct Bouncer {
    child: Child,
    port: u16,
    _dir: tempfile::TempDir,
}

impl Drop for Bouncer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// (user, password, host, port, database) of a `postgres://` URL.
fn parts(url: &str) -> (String, String, String, String, String) {
    let rest = url.split_once("://").unwrap().1;
    let (auth, rest) = rest.rsplit_once('@').unwrap();
    let (user, password) = auth.split_once(':').unwrap_or((auth, ""));
    let (host_port, db) = rest.split_once('/').unwrap();
    let db = db.split('?').next().unwrap();
    let (host, port) = host_port.rsplit_once(':').unwrap_or((host_port, "5432"));
    let s = |v: &str| v.to_owned();
    (s(user), s(password), s(host), s(port), s(db))
}

impl Bouncer {
    fn start(pgbouncer: &Path, url: &str, mode: &str) -> Bouncer {
        let (user, password, host, port, _) = parts(url);
        let dir = tempfile::tempdir().unwrap();
        let bport = free_port();
        let ini = dir.path().join("pgbouncer.ini");
        let password = match password.is_empty() {
            true => String::new(),
            false => format!(" password={password}"),
        };
        std::fs::write(
            &ini,
            format!(
                "[databases]\n* = host={host} port={port} user={user}{password}\n\
                 [pgbouncer]\nlisten_addr = 127.0.0.1\nlisten_port = {bport}\n\
                 unix_socket_dir =\nauth_type = any\npool_mode = {mode}\n\
                 max_client_conn = 200\ndefault_pool_size = 20\n\
                 ignore_startup_parameters = extra_float_digits,options\n"
            ),
        )
        .unwrap();
        let mut cmd = Command::new(pgbouncer);
        // PgBouncer refuses to run as root.
        if is_root() {
            use std::os::unix::fs::PermissionsExt;
            for p in [dir.path(), &ini] {
                std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755)).unwrap();
            }
            cmd.args(["-u", "postgres"]);
        }
        let child = cmd
            .arg(&ini)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn pgbouncer");
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", bport)).is_err() {
            assert!(
                Instant::now() < deadline,
                "pgbouncer did not listen on {bport}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        Bouncer {
            child,
            port: bport,
            _dir: dir,
        }
    }

    /// `url`'s database through this PgBouncer.
    fn url(&self, url: &str) -> String {
        let (user, _, _, _, db) = parts(url);
        format!("postgres://{user}@127.0.0.1:{}/{db}", self.port)
    }
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

async fn insert_by_plain_sql(url: &str, events: i64) {
    use sqlx::Connection;
    let mut conn = sqlx::PgConnection::connect(url).await.unwrap();
    // The simple query protocol: what a producer in another language sends
    // through a transaction pool.
    sqlx::raw_sql(&format!(
        "INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload)
         SELECT 'order', 'agg-' || (g % 10), 'order.created', jsonb_build_object('n', g)
         FROM generate_series(1, {events}) g"
    ))
    .execute(&mut conn)
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_session_pooling_the_relay_delivers_everything() {
    let Some(pgbouncer) = tool("pgbouncer", &["/usr/sbin"]) else {
        return;
    };
    let (db, pool) = outbox_testkit::postgres::migrated_test_db().await;
    let bouncer = Bouncer::start(&pgbouncer, &db.url, "session");
    let url = bouncer.url(&db.url);
    insert_by_plain_sql(&url, 2001).await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("events.jsonl");
    let took = common::drain_with(&url, &pool, &format!("file:{}", file.display()), "pooled").await;
    let delivered = common::read_deliveries(&file).len();
    assert!(delivered >= 2001, "{delivered} delivered");
    eprintln!("session pooling: 2001 events drained in {took:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_transaction_pooling_the_relay_says_it_needs_a_session_pool() {
    let Some(pgbouncer) = tool("pgbouncer", &["/usr/sbin"]) else {
        return;
    };
    let db = outbox_testkit::postgres::test_db().await;
    let bouncer = Bouncer::start(&pgbouncer, &db.url, "transaction");
    let url = bouncer.url(&db.url);
    // Migrations and producers are fine through the transaction pool.
    let out = common::run(&["migrate"], Some(&url));
    assert!(
        out.status.success(),
        "migrate: {}",
        common::text(&out.stderr)
    );
    insert_by_plain_sql(&url, 10).await;

    let dir = tempfile::tempdir().unwrap();
    let spec = format!("file:{}", dir.path().join("events.jsonl").display());
    let mut relay = tokio::process::Command::from({
        let mut cmd = common::bin();
        cmd.env("DATABASE_URL", &url).args([
            "relay",
            "--publisher",
            &spec,
            "--instance-id",
            "pooled",
        ]);
        cmd
    });
    let out = tokio::time::timeout(Duration::from_secs(30), relay.kill_on_drop(true).output())
        .await
        .expect("the relay stops at start")
        .unwrap();
    let stderr = common::text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("not sessions of their own"), "{stderr}");
    assert!(
        stderr.contains("pool_mode = session"),
        "says what to do: {stderr}"
    );
    assert!(!stderr.contains("sqlx_s_"), "{stderr}");
    assert_eq!(stderr.trim_end().lines().count(), 1, "one line: {stderr}");
    assert!(
        !dir.path().join("events.jsonl").exists()
            || common::read_deliveries(&dir.path().join("events.jsonl")).is_empty()
    );
    eprintln!("{}", stderr.trim_end());
}

/// A WAL-mode schema's relay behind PgBouncer: its replication connection
/// cannot be pooled, so it exits at once, in one line naming PgBouncer and
/// the fix, while producers may still write through the pooler.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_wal_mode_the_relay_refuses_a_pooler_naming_the_fix() {
    let Some(pgbouncer) = tool("pgbouncer", &["/usr/sbin"]) else {
        eprintln!("skipped: pgbouncer is not installed");
        return;
    };
    let cluster = tokio::task::spawn_blocking(|| outbox_testkit::postgres::logical_cluster(&[]))
        .await
        .unwrap();
    let direct = cluster.url();
    let out = common::run(&["migrate", "--mode", "wal"], Some(&direct));
    assert!(out.status.success(), "{}", common::text(&out.stderr));
    let bouncer = Bouncer::start(&pgbouncer, &direct, "session");
    let pooled = bouncer.url(&direct);
    // Producers may go through the pooler: outbox_emit is a function call.
    {
        use sqlx::Connection;
        let mut conn = sqlx::PgConnection::connect(&pooled).await.unwrap();
        sqlx::raw_sql("SELECT outbox_emit('order', '1', 'order.created', '{}')")
            .execute(&mut conn)
            .await
            .unwrap();
    }
    let line = common::one_error_line(&common::relay_to_a_file(&pooled));
    assert!(
        line.contains("PgBouncer") && line.contains("server's own address"),
        "{line}"
    );
}
