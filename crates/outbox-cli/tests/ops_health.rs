//! `/healthz` and `/readyz` of a real relay: readiness turns 503 (with a
//! body saying what is wrong) while PostgreSQL is down and 200 again once it
//! is back, while liveness stays 200 throughout.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use outbox_testkit::postgres::{free_port, PgCluster};
use serde_json::Value;

/// `GET path` on `127.0.0.1:port`: (status, JSON body), or `None` if
/// nothing answers.
fn get(port: u16, path: &str) -> Option<(u16, Value)> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut raw = String::new();
    s.read_to_string(&mut raw).ok()?;
    let status = raw.split(' ').nth(1)?.parse().ok()?;
    let body = serde_json::from_str(raw.split_once("\r\n\r\n")?.1).ok()?;
    Some((status, body))
}

/// Polls `cond` until it holds or `limit` passes.
fn wait_for<T>(what: &str, limit: Duration, mut cond: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(v) = cond() {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {limit:?} waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn ready(port: u16, want: u16) -> Option<Value> {
    get(port, "/readyz")
        .filter(|(s, _)| *s == want)
        .map(|(_, b)| b)
}

struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn enqueue_blocking(url: &str, n: i64) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let pool = sqlx::PgPool::connect(url).await.unwrap();
        let events: Vec<_> = (0..n)
            .map(|i| common::event(&format!("h{}", i % 5), i))
            .collect();
        outbox::Outbox::new()
            .enqueue_many(&pool, &events)
            .await
            .unwrap();
        pool.close().await;
    });
}

#[test]
fn readyz_follows_postgres_down_and_back_while_healthz_stays_up() {
    let mut cluster = PgCluster::start().expect("start a throwaway postgres");
    let url = cluster.url();
    let out = common::run(&["migrate"], Some(&url));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let dir = tempfile::tempdir().unwrap();
    let sink = dir.path().join("events.jsonl");
    let port = free_port();
    let relay = common::bin()
        .env("DATABASE_URL", &url)
        .env("OUTBOX_HTTP_REFRESH_MS", "100")
        .env("OUTBOX_HTTP_CHECK_TIMEOUT_MS", "1000")
        .args([
            "relay",
            "--instance-id",
            "probed",
            "--lease-ms",
            "3000",
            "--poll-max-ms",
            "50",
        ])
        .args(["--publisher", &format!("file:{}", sink.display())])
        .args(["--http-addr", &format!("127.0.0.1:{port}")])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut relay = Killed(relay);

    let body = wait_for("readiness", Duration::from_secs(30), || ready(port, 200));
    assert_eq!(body["status"], "ready", "{body}");
    assert_eq!(body["checks"]["database"]["ok"], true, "{body}");
    assert_eq!(body["checks"]["publisher"]["name"], "file", "{body}");
    let (status, alive) = get(port, "/healthz").unwrap();
    assert_eq!(
        (status, alive["status"].as_str()),
        (200, Some("alive")),
        "{alive}"
    );
    assert_eq!(alive["instance"], "probed");
    wait_for("partitions", Duration::from_secs(30), || {
        ready(port, 200).filter(|b| b["checks"]["relay"]["partitions_owned"] == 32)
    });

    cluster.stop().expect("stop postgres");
    let body = wait_for("readiness to fail", Duration::from_secs(30), || {
        ready(port, 503)
    });
    assert_eq!(body["status"], "not ready", "{body}");
    assert_eq!(body["checks"]["database"]["ok"], false, "{body}");
    assert!(
        body["checks"]["database"]["error"]
            .as_str()
            .is_some_and(|e| !e.is_empty()),
        "{body}"
    );
    let problems = body["problems"].to_string();
    assert!(problems.contains("database"), "{body}");
    let (status, _) = get(port, "/healthz").expect("alive while the database is down");
    assert_eq!(status, 200);
    assert!(
        relay.0.try_wait().unwrap().is_none(),
        "the relay rides out the outage"
    );

    cluster.restart().expect("restart postgres");
    let body = wait_for("readiness to return", Duration::from_secs(60), || {
        ready(port, 200)
    });
    assert_eq!(body["checks"]["database"]["ok"], true, "{body}");

    // Not only ready on paper: it relays again.
    enqueue_blocking(&url, 50);
    wait_for(
        "the relay to deliver after the outage",
        Duration::from_secs(60),
        || (common::read_deliveries(&sink).len() >= 50).then_some(()),
    );

    Command::new("kill")
        .args(["-TERM", &relay.0.id().to_string()])
        .status()
        .unwrap();
    let status = wait_for("the relay to exit", Duration::from_secs(30), || {
        relay.0.try_wait().unwrap()
    });
    assert_eq!(status.code(), Some(0));
}
