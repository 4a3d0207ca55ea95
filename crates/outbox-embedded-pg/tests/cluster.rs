//! The throwaway cluster against real PostgreSQL servers: it starts, applies
//! its options, survives stop, kill and restart, and leaves nothing behind,
//! even when its owner is killed.

use std::io::{BufRead, BufReader, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use outbox_embedded_pg::{find_bin_dir, free_port, PgCluster, PgOptions};
use sqlx::{Connection, PgConnection};

/// Polls `condition` until it holds, panicking after `timeout`.
fn wait_for(what: &str, timeout: Duration, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !condition() {
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn accepts_connections(port: u16) -> bool {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok()
}

/// The cluster's temporary directory: the data directory's parent.
fn base_dir(data_dir: &Path) -> PathBuf {
    data_dir
        .parent()
        .expect("data dir has a parent")
        .to_path_buf()
}

async fn connect(url: &str) -> PgConnection {
    PgConnection::connect(url)
        .await
        .unwrap_or_else(|e| panic!("connecting to {url}: {e}"))
}

/// Runs `sql`, which must succeed.
async fn execute(conn: &mut PgConnection, sql: &str) {
    sqlx::query(sql)
        .execute(conn)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
}

/// The one text value `sql` selects.
async fn text(conn: &mut PgConnection, sql: &str) -> String {
    sqlx::query_scalar(sql)
        .fetch_one(conn)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
}

/// The values of the settings `names`, in that order.
async fn settings(conn: &mut PgConnection, names: &[&str]) -> Vec<String> {
    sqlx::query_scalar(
        "SELECT current_setting(n) FROM unnest($1::text[]) WITH ORDINALITY AS s(n, i) ORDER BY i",
    )
    .bind(names)
    .fetch_all(conn)
    .await
    .expect("settings")
}

async fn count_rows(conn: &mut PgConnection) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM kept")
        .fetch_one(conn)
        .await
        .expect("counting rows")
}

#[test]
fn find_bin_dir_finds_initdb_and_postgres() {
    let dir = find_bin_dir().expect("postgresql binaries");
    assert!(dir.join("initdb").is_file(), "{}", dir.display());
    assert!(dir.join("postgres").is_file(), "{}", dir.display());
}

#[test]
fn free_port_can_be_bound() {
    let port = free_port();
    assert_ne!(port, 0);
    TcpListener::bind((Ipv4Addr::LOCALHOST, port)).expect("the port is free");
}

#[tokio::test]
async fn cluster_starts_and_answers_select_1() {
    let cluster = PgCluster::start().expect("start");
    assert!(cluster.is_running());
    assert_eq!(
        cluster.url(),
        format!("postgres://postgres@127.0.0.1:{}/postgres", cluster.port())
    );
    assert!(cluster.data_dir().join("PG_VERSION").is_file());

    let mut conn = connect(&cluster.url()).await;
    let one: i32 = sqlx::query_scalar("SELECT 1")
        .fetch_one(&mut conn)
        .await
        .expect("SELECT 1");
    assert_eq!(one, 1);
    assert_eq!(
        text(&mut conn, "SELECT current_user::text").await,
        "postgres"
    );
    assert_eq!(
        settings(
            &mut conn,
            &["fsync", "synchronous_commit", "max_connections"]
        )
        .await,
        ["off", "off", "200"]
    );
    conn.close().await.expect("close");

    let mut other = connect(&cluster.url_for("template1")).await;
    assert_eq!(
        text(&mut other, "SELECT current_database()::text").await,
        "template1"
    );
}

#[tokio::test]
async fn start_with_applies_options() {
    let cluster = PgCluster::start_with(PgOptions {
        fsync: true,
        max_connections: 37,
        extra_conf: vec![("work_mem".to_owned(), "7MB".to_owned())],
        ..PgOptions::default()
    })
    .expect("start");
    let mut conn = connect(&cluster.url()).await;
    let names = ["fsync", "synchronous_commit", "max_connections", "work_mem"];
    assert_eq!(settings(&mut conn, &names).await, ["on", "on", "37", "7MB"]);
}

#[tokio::test]
async fn stop_and_restart_keep_data() {
    let mut cluster = PgCluster::start().expect("start");
    let port = cluster.port();
    let mut conn = connect(&cluster.url()).await;
    execute(&mut conn, "CREATE TABLE kept (id int PRIMARY KEY)").await;
    execute(&mut conn, "INSERT INTO kept SELECT generate_series(1, 100)").await;
    conn.close().await.expect("close");

    cluster.stop().expect("stop");
    assert!(!cluster.is_running());
    wait_for(
        "the port to close after stop",
        Duration::from_secs(10),
        || !accepts_connections(port),
    );
    assert!(cluster.data_dir().join("PG_VERSION").is_file());
    cluster
        .stop()
        .expect("stopping a stopped cluster is a no-op");

    cluster.restart().expect("restart");
    assert!(cluster.is_running());
    assert_eq!(cluster.port(), port);
    let mut conn = connect(&cluster.url()).await;
    assert_eq!(count_rows(&mut conn).await, 100);
    conn.close().await.expect("close");

    // Restarting a running cluster stops it first.
    cluster.restart().expect("restart while running");
    let mut conn = connect(&cluster.url()).await;
    assert_eq!(count_rows(&mut conn).await, 100);
}

#[tokio::test]
async fn kill_and_restart_recover() {
    // Commits reach the operating system before they are acknowledged, so
    // killing the server may lose none of them.
    let mut cluster = PgCluster::start_with(PgOptions {
        extra_conf: vec![("synchronous_commit".to_owned(), "on".to_owned())],
        ..PgOptions::default()
    })
    .expect("start");
    let port = cluster.port();
    let mut conn = connect(&cluster.url()).await;
    execute(&mut conn, "CREATE TABLE kept (id int PRIMARY KEY)").await;
    for id in 1..=20 {
        sqlx::query("INSERT INTO kept VALUES ($1)")
            .bind(id)
            .execute(&mut conn)
            .await
            .expect("insert");
    }

    cluster.kill();
    assert!(!cluster.is_running());
    assert!(
        sqlx::query("SELECT 1").execute(&mut conn).await.is_err(),
        "the old connection must be dead"
    );
    drop(conn);
    wait_for(
        "the port to close after kill",
        Duration::from_secs(10),
        || !accepts_connections(port),
    );

    cluster.restart().expect("restart after kill");
    assert!(cluster.is_running());
    assert_eq!(cluster.port(), port);
    let mut conn = connect(&cluster.url()).await;
    assert_eq!(count_rows(&mut conn).await, 20);
    sqlx::query("INSERT INTO kept VALUES (21)")
        .execute(&mut conn)
        .await
        .expect("writes work after recovery");
    assert_eq!(count_rows(&mut conn).await, 21);
    conn.close().await.expect("close");

    // The server log records the crash recovery.
    let log = std::fs::read_to_string(cluster.log_path()).expect("server log");
    assert!(
        log.contains("was not properly shut down"),
        "no crash recovery in the log:\n{log}"
    );
}

#[test]
fn drop_stops_the_server_and_removes_the_data_dir() {
    let cluster = PgCluster::start().expect("start");
    let port = cluster.port();
    let base = base_dir(cluster.data_dir());
    assert!(base.is_dir());
    assert!(accepts_connections(port));

    drop(cluster);
    assert!(!base.exists(), "{} still exists after drop", base.display());
    wait_for("the port to close", Duration::from_secs(10), || {
        !accepts_connections(port)
    });
}

#[test]
fn keep_on_drop_keeps_the_data_dir() {
    let cluster = PgCluster::start_with(PgOptions {
        keep_on_drop: true,
        ..PgOptions::default()
    })
    .expect("start");
    let port = cluster.port();
    let data_dir = cluster.data_dir().to_path_buf();

    drop(cluster);
    wait_for("the port to close", Duration::from_secs(10), || {
        !accepts_connections(port)
    });
    assert!(data_dir.join("PG_VERSION").is_file());
    std::fs::remove_dir_all(base_dir(&data_dir)).expect("cleaning up");
}

/// Set in the environment of the helper process started by
/// `watchdog_cleans_up_after_its_owner_is_killed`.
const HELPER_ENV: &str = "OUTBOX_EMBEDDED_PG_ORPHAN_HELPER";

/// Not a test: the process that `watchdog_cleans_up_after_its_owner_is_killed`
/// starts and kills. Does nothing unless `HELPER_ENV` is set.
#[test]
#[ignore = "helper process for watchdog_cleans_up_after_its_owner_is_killed"]
fn orphan_helper() {
    if std::env::var_os(HELPER_ENV).is_none() {
        return;
    }
    let cluster = PgCluster::start().expect("start");
    let mut out = std::io::stdout();
    writeln!(
        out,
        "CLUSTER {} {}",
        cluster.port(),
        cluster.data_dir().display()
    )
    .expect("stdout");
    out.flush().expect("stdout");
    loop {
        std::thread::sleep(Duration::from_secs(60));
    }
}

#[test]
fn watchdog_cleans_up_after_its_owner_is_killed() {
    let exe = std::env::current_exe().expect("test binary");
    let mut helper = Command::new(exe)
        .args(["--exact", "orphan_helper", "--ignored", "--nocapture"])
        .env(HELPER_ENV, "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .expect("starting the helper");
    let stdout = BufReader::new(helper.stdout.take().expect("stdout"));
    let line = stdout
        .lines()
        .map(|line| line.expect("reading the helper's output"))
        .find(|line| line.starts_with("CLUSTER "))
        .expect("the helper started no cluster");
    let mut fields = line.split_whitespace().skip(1);
    let port: u16 = fields.next().expect("port").parse().expect("port");
    let data_dir = PathBuf::from(fields.next().expect("data dir"));
    let base = base_dir(&data_dir);
    assert!(accepts_connections(port));
    assert!(data_dir.is_dir());

    // SIGKILL: no destructor runs in the helper.
    helper.kill().expect("killing the helper");
    helper.wait().expect("reaping the helper");

    wait_for(
        "the orphaned server to stop and its directory to go",
        Duration::from_secs(30),
        || !accepts_connections(port) && !base.exists(),
    );
}
