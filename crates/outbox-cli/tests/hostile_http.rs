//! The relay's HTTP endpoints under abuse: idle and slow connections, and a
//! flood of `/metrics` requests, never keep `/healthz` and `/readyz` from
//! answering; a schema dropped under a running relay makes `/readyz` say
//! which table is missing and how to fix it, in agreement with
//! `outbox_database_up`.
//!
//! Longer than most files: the abusive clients (idle, slowloris, flood) are
//! small hand-written TCP peers kept next to the tests that use them.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::Child;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use outbox_testkit::postgres::{free_port, PgCluster};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::watch;

/// What an orchestrator's probe may wait for an answer, with margin: the
/// usual probe timeout is 1 s.
const PROBE_LIMIT: Duration = Duration::from_secs(2);

/// How long the probes keep going under each abuse.
const PROBE_SPAN: Duration = Duration::from_secs(8);

/// Idle connections held open (reopened when the server closes one): more
/// than the server serves at once.
const IDLE: usize = 400;

/// Connections that send a request head one byte at a time.
const SLOWLORIS: usize = 20;

/// Concurrent `/metrics` clients, each asking again as soon as answered.
const SCRAPERS: usize = 32;

/// The tests measure latency on a 2-core machine: one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// A running `outbox relay` with its HTTP endpoints on `port`; its stderr
/// is collected (a pipe nobody reads would block its logging).
struct Relay {
    child: Child,
    port: u16,
    log: Arc<Mutex<String>>,
    _dir: tempfile::TempDir,
}

impl Relay {
    fn start(url: &str, schema: &str) -> Relay {
        let dir = tempfile::tempdir().unwrap();
        let port = free_port();
        let mut child = common::spawn_relay(
            url,
            &dir.path().join("events.jsonl"),
            "hostile",
            &[
                "--schema",
                schema,
                "--http-addr",
                &format!("127.0.0.1:{port}"),
            ],
        );
        let log = Arc::new(Mutex::new(String::new()));
        let stderr = child.stderr.take().expect("piped stderr");
        let sink = log.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                let mut log = sink.lock().unwrap();
                log.push_str(&line);
                log.push('\n');
            }
        });
        let relay = Relay {
            child,
            port,
            log,
            _dir: dir,
        };
        relay.wait_for("readiness", Duration::from_secs(30), |r| {
            r.get("/readyz").ok().filter(|(s, _)| *s == 200)
        });
        relay
    }

    fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    /// `GET path` on a fresh connection within [`PROBE_LIMIT`].
    fn get(&self, path: &str) -> Result<(u16, String), String> {
        get_within(self.port, path, PROBE_LIMIT)
    }

    /// Polls `cond` every 50 ms until it holds or `limit` passes.
    fn wait_for<T>(&self, what: &str, limit: Duration, cond: impl Fn(&Self) -> Option<T>) -> T {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(v) = cond(self) {
                return v;
            }
            assert!(
                Instant::now() < deadline,
                "timed out after {limit:?} waiting for {what}; relay log:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The value of `outbox_database_up` (of the relay's one source) in
    /// `/metrics`.
    fn database_up(&self) -> f64 {
        let (status, text) = self.get("/metrics").expect("/metrics answers");
        assert_eq!(status, 200, "{text}");
        let series = text
            .lines()
            .find_map(|l| l.strip_prefix("outbox_database_up{")?.split_once(' '))
            .map(|(labels, _)| format!("outbox_database_up{{{labels}"));
        sample(
            &text,
            &series.unwrap_or_else(|| panic!("no outbox_database_up in\n{text}")),
        )
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn sample(text: &str, name: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("no sample {name} in\n{text}"))
}

/// One `GET path` on a fresh connection to `127.0.0.1:port`, all of it
/// (connect, request, whole response) within `limit`: (status, body).
fn get_within(port: u16, path: &str, limit: Duration) -> Result<(u16, String), String> {
    let deadline = Instant::now() + limit;
    let left = || {
        deadline
            .checked_duration_since(Instant::now())
            .filter(|d| !d.is_zero())
            .ok_or_else(|| format!("no answer within {limit:?}"))
    };
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let mut s = TcpStream::connect_timeout(&addr, left()?).map_err(|e| format!("connect: {e}"))?;
    s.set_write_timeout(Some(left()?))
        .map_err(|e| e.to_string())?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    )
    .map_err(|e| format!("send: {e}"))?;
    let mut raw = Vec::new();
    let mut buf = [0u8; 16 * 1024];
    loop {
        s.set_read_timeout(Some(left()?))
            .map_err(|e| e.to_string())?;
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => raw.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                return Err(format!("no answer within {limit:?}"))
            }
            Err(e) => return Err(format!("read: {e}")),
        }
    }
    let raw = String::from_utf8_lossy(&raw);
    let status = raw
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("not an HTTP response: {raw:?}"))?;
    let body = raw.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    Ok((status, body.to_owned()))
}

/// Probes `/healthz` and `/readyz` in turn, every 100 ms for
/// [`PROBE_SPAN`] (at most 200 probes); fails listing every probe that did
/// not answer 200 within [`PROBE_LIMIT`].
fn probe_steadily(relay: &Relay, during: &str) {
    let start = Instant::now();
    let mut latencies = Vec::new();
    let mut failures = Vec::new();
    for i in 0..200 {
        if start.elapsed() >= PROBE_SPAN {
            break;
        }
        let path = if i % 2 == 0 { "/healthz" } else { "/readyz" };
        let t = Instant::now();
        let answer = relay.get(path);
        let took = t.elapsed();
        latencies.push(took);
        match answer {
            Ok((200, _)) if took <= PROBE_LIMIT => {}
            Ok((status, body)) => failures.push(format!(
                "{path} at {:?}: {status} after {took:?}: {body}",
                start.elapsed()
            )),
            Err(e) => failures.push(format!("{path} at {:?}: {e}", start.elapsed())),
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    latencies.sort();
    let answered = latencies.len() - failures.len();
    let summary = format!(
        "{during}: {answered} of {} probes answered 200 within {PROBE_LIMIT:?}; median {:?}, max {:?}",
        latencies.len(),
        latencies[latencies.len() / 2],
        latencies[latencies.len() - 1],
    );
    eprintln!("{summary}");
    assert!(
        failures.is_empty(),
        "{summary}\n{}\nrelay log:\n{}",
        failures.join("\n"),
        relay.log()
    );
}

/// Clients run on a runtime of their own until dropped.
struct Abuse {
    rt: tokio::runtime::Runtime,
    stop: watch::Sender<bool>,
    /// Connections opened so far.
    opened: Arc<AtomicUsize>,
    /// Responses read so far (scrapers).
    answered: Arc<AtomicUsize>,
    /// The first unexpected response (scrapers).
    wrong: Arc<Mutex<Option<String>>>,
}

impl Abuse {
    fn new() -> Abuse {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        Abuse {
            rt,
            stop: watch::channel(false).0,
            opened: Arc::new(AtomicUsize::new(0)),
            answered: Arc::new(AtomicUsize::new(0)),
            wrong: Arc::new(Mutex::new(None)),
        }
    }

    /// `n` connections, each running `session` until the server closes it
    /// (the session returns) and reopened 100 ms later, until the stop.
    fn reconnecting<F, Fut>(&self, port: u16, n: usize, session: F)
    where
        F: Fn(tokio::net::TcpStream, watch::Receiver<bool>) -> Fut + Clone + Send + 'static,
        Fut: std::future::Future<Output = ()> + Send,
    {
        for _ in 0..n {
            let (stop, opened) = (self.stop.subscribe(), self.opened.clone());
            let session = session.clone();
            self.rt.spawn(async move {
                while !*stop.borrow() {
                    if let Ok(s) = tokio::net::TcpStream::connect(("127.0.0.1", port)).await {
                        opened.fetch_add(1, Ordering::Relaxed);
                        session(s, stop.clone()).await;
                        if *stop.borrow() {
                            return;
                        }
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            });
        }
    }

    /// `n` connections that send nothing, each reopened 100 ms after the
    /// server closes it.
    fn idle(&self, port: u16, n: usize) {
        self.reconnecting(port, n, |mut s, mut stop| async move {
            let mut buf = [0u8; 256];
            loop {
                tokio::select! {
                    r = s.read(&mut buf) => if matches!(r, Ok(0) | Err(_)) { break },
                    _ = stop.changed() => return,
                }
            }
        });
    }

    /// `n` connections that send a request head one byte every 100 ms,
    /// each reopened 100 ms after the server closes it.
    fn slowloris(&self, port: u16, n: usize) {
        self.reconnecting(port, n, |mut s, mut stop| async move {
            let head = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ";
            let mut buf = [0u8; 256];
            for byte in head.iter().chain(std::iter::repeat(&b'a')) {
                if s.write_all(&[*byte]).await.is_err() {
                    break;
                }
                tokio::select! {
                    r = s.read(&mut buf) => if matches!(r, Ok(0) | Err(_)) { break },
                    _ = tokio::time::sleep(Duration::from_millis(100)) => {}
                    _ = stop.changed() => return,
                }
            }
        });
    }

    /// `n` clients asking for `/metrics` again as soon as answered, each
    /// answer checked.
    fn scrapers(&self, port: u16, n: usize) {
        for _ in 0..n {
            let (stop, opened, answered, wrong) = (
                self.stop.subscribe(),
                self.opened.clone(),
                self.answered.clone(),
                self.wrong.clone(),
            );
            self.rt.spawn(async move {
                while !*stop.borrow() {
                    let Ok(mut s) = tokio::net::TcpStream::connect(("127.0.0.1", port)).await
                    else {
                        tokio::time::sleep(Duration::from_millis(10)).await;
                        continue;
                    };
                    opened.fetch_add(1, Ordering::Relaxed);
                    let request =
                        "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
                    let mut raw = Vec::new();
                    if s.write_all(request.as_bytes()).await.is_ok()
                        && s.read_to_end(&mut raw).await.is_ok()
                    {
                        let raw = String::from_utf8_lossy(&raw);
                        if raw.starts_with("HTTP/1.1 200")
                            && raw
                                .lines()
                                .any(|l| l.starts_with("outbox_database_up{") && l.ends_with("} 1"))
                        {
                            answered.fetch_add(1, Ordering::Relaxed);
                        } else {
                            wrong.lock().unwrap().get_or_insert(raw.into_owned());
                        }
                    }
                }
            });
        }
    }
}

impl Drop for Abuse {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
    }
}

fn migrated_cluster(schema: &str) -> (PgCluster, String) {
    let cluster = PgCluster::start().expect("start a throwaway postgres");
    let url = cluster.url();
    migrate(&url, schema);
    (cluster, url)
}

fn migrate(url: &str, schema: &str) {
    let out = common::run(&["migrate", "--schema", schema], Some(url));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn idle_and_slow_connections_do_not_starve_the_probes() {
    let _serial = serial();
    let (_cluster, url) = migrated_cluster("public");
    let mut relay = Relay::start(&url, "public");

    let abuse = Abuse::new();
    abuse.idle(relay.port, IDLE);
    abuse.slowloris(relay.port, SLOWLORIS);
    // Let the clients connect before probing.
    let deadline = Instant::now() + Duration::from_secs(10);
    while abuse.opened.load(Ordering::Relaxed) < IDLE + SLOWLORIS && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    probe_steadily(
        &relay,
        &format!("{IDLE} idle and {SLOWLORIS} slowloris connections"),
    );
    let opened = abuse.opened.load(Ordering::Relaxed);
    eprintln!("abusive connections opened: {opened}");
    assert!(
        opened >= IDLE + SLOWLORIS,
        "only {opened} abusive connections were opened"
    );
    drop(abuse);

    // Still serving normally afterwards, metrics included.
    assert_eq!(relay.database_up(), 1.0);
    assert!(
        relay.child.try_wait().unwrap().is_none(),
        "the relay exited"
    );
}

#[test]
fn a_flood_of_metrics_requests_does_not_block_the_probes() {
    let _serial = serial();
    let (_cluster, url) = migrated_cluster("public");
    let relay = Relay::start(&url, "public");

    let abuse = Abuse::new();
    abuse.scrapers(relay.port, SCRAPERS);
    probe_steadily(&relay, &format!("{SCRAPERS} concurrent /metrics clients"));
    let answered = abuse.answered.load(Ordering::Relaxed);
    let wrong = abuse.wrong.lock().unwrap().take();
    drop(abuse);
    assert_eq!(wrong, None, "an unexpected /metrics answer");
    eprintln!("/metrics answered {answered} times meanwhile");
    assert!(answered >= 100, "only {answered} /metrics answers");
}

#[test]
fn a_dropped_schema_is_named_by_readyz_and_agrees_with_the_gauge() {
    let _serial = serial();
    let schema = "hostile";
    let (_cluster, url) = migrated_cluster(schema);
    let relay = Relay::start(&url, schema);
    assert_eq!(relay.database_up(), 1.0);

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        use sqlx::Connection;
        let mut conn = sqlx::PgConnection::connect(&url).await.unwrap();
        sqlx::query(&format!("DROP SCHEMA {schema} CASCADE"))
            .execute(&mut conn)
            .await
            .unwrap();
        conn.close().await.unwrap();
    });

    let body = relay.wait_for("/readyz to fail", Duration::from_secs(20), |r| {
        r.get("/readyz").ok().filter(|(s, _)| *s == 503)
    });
    let body: serde_json::Value = serde_json::from_str(&body.1).unwrap();
    assert_eq!(body["checks"]["database"]["ok"], false, "{body}");
    let problems = body["problems"].to_string();
    for want in ["database", "outbox_events", schema, "outbox migrate"] {
        assert!(problems.contains(want), "{want:?} not in {body}");
    }
    assert_eq!(
        relay.database_up(),
        0.0,
        "/readyz and outbox_database_up disagree"
    );
    let (status, _) = relay.get("/healthz").expect("alive without its tables");
    assert_eq!(status, 200);

    // The metrics refresher meets the same verdict: still 503 after it ran.
    std::thread::sleep(Duration::from_millis(1500));
    let (status, body) = relay.get("/readyz").unwrap();
    assert_eq!(status, 503, "{body}");
    assert_eq!(relay.database_up(), 0.0);
    // Named in the log once, not at every check.
    let log = relay.log();
    let named = log
        .lines()
        .filter(|l| l.contains("readiness") && l.contains("outbox_events"))
        .count();
    assert_eq!(named, 1, "{log}");

    migrate(&url, schema);
    relay.wait_for("/readyz to recover", Duration::from_secs(30), |r| {
        r.get("/readyz").ok().filter(|(s, _)| *s == 200)
    });
    assert_eq!(relay.database_up(), 1.0);
}
