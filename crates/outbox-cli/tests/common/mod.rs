//! Helpers for tests that run the `outbox` program as a child process.
//!
//! Longer than most files: the helpers every CLI test binary shares
//! (spawning the program, its databases, reading its output), kept in one
//! module so each binary compiles them once.
#![allow(dead_code)]

use std::path::Path;
use std::process::{Child, Command, Output, Stdio};

use outbox::NewEvent;

pub fn bin() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_outbox"));
    cmd.env_remove("DATABASE_URL").env_remove("RUST_LOG");
    cmd
}

/// Processes running `outbox relay` with `DATABASE_URL` set to `url`.
pub fn relays_on(url: &str) -> Vec<u32> {
    let has = |hay: &[u8], needle: &str| hay.split(|&b| b == 0).any(|p| p == needle.as_bytes());
    let env = format!("DATABASE_URL={url}");
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| {
            let pid: u32 = e.file_name().to_str()?.parse().ok()?;
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
            let environ = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
            (has(&cmdline, "relay") && has(&environ, &env)).then_some(pid)
        })
        .collect()
}

/// Bytes a child printed, as text.
pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// `outbox config check` with `env` and `args` (and no `OUTBOX_CONFIG`).
pub fn config_check(env: &[(&str, &str)], args: &[&str]) -> Output {
    let mut cmd = bin();
    cmd.env_remove("OUTBOX_CONFIG").envs(env.iter().copied());
    cmd.args(["config", "check"]).args(args);
    cmd.output().unwrap()
}

pub fn run(args: &[&str], url: Option<&str>) -> Output {
    let mut cmd = bin();
    cmd.args(args);
    if let Some(url) = url {
        cmd.env("DATABASE_URL", url);
    }
    cmd.output().expect("run outbox")
}

/// `outbox bench ARGS --json` (`args` split at spaces) on the database at
/// `url`, which must succeed: its last line of output as JSON, and the
/// whole output.
pub fn bench_json(url: &str, args: &str) -> (serde_json::Value, String) {
    let mut argv: Vec<&str> = std::iter::once("bench").chain(args.split(' ')).collect();
    argv.push("--json");
    let out = run(&argv, Some(url));
    let stdout = text(&out.stdout);
    assert!(
        out.status.success(),
        "bench failed: {}{}",
        stdout,
        text(&out.stderr)
    );
    let line = stdout.lines().last().expect("a JSON line");
    let v = serde_json::from_str(line).unwrap_or_else(|e| panic!("{line:?}: {e}"));
    (v, stdout)
}

/// [`bench_json`] with `args` on a fresh test database; the database (kept
/// until the caller drops it) with the results.
pub async fn bench_fresh(
    args: &str,
) -> (outbox_testkit::postgres::TestDb, serde_json::Value, String) {
    let db = outbox_testkit::postgres::test_db().await;
    let (v, stdout) = bench_json(&db.url, args);
    (db, v, stdout)
}

/// The `--batch-size` of relays started by [`spawn_relay`].
pub const BATCH_SIZE: usize = 200;

/// What one crash of such a relay may deliver again: the batch delivered but
/// not yet acknowledged (its acknowledgement rides on the next claim) plus
/// the batch being published.
pub const IN_FLIGHT_WINDOW: usize = 2 * BATCH_SIZE;

/// Starts `outbox relay` publishing to the JSON-lines file `file`.
pub fn spawn_relay(url: &str, file: &Path, instance: &str, extra: &[&str]) -> Child {
    bin()
        .env("DATABASE_URL", url)
        .args([
            "relay",
            "--publisher",
            &format!("file:{}", file.display()),
            "--instance-id",
            instance,
            "--batch-size",
            &BATCH_SIZE.to_string(),
            "--lease-ms",
            "1500",
            "--poll-max-ms",
            "50",
        ])
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn relay")
}

/// Event `n` of aggregate `agg`.
pub fn event(agg: &str, n: i64) -> NewEvent {
    NewEvent::json("order", agg, "order.updated", serde_json::json!({ "n": n }))
}

/// Round `n` of a backlog: event `n` of each aggregate `agg-0` …
/// `agg-{aggregates - 1}`.
pub fn round(aggregates: usize, n: i64) -> Vec<NewEvent> {
    (0..aggregates)
        .map(|a| event(&format!("agg-{a}"), n))
        .collect()
}

/// A migrated test database, a pool on it, and a temporary directory
/// (kept until dropped) with the path of a JSON-lines file in it for
/// relays to publish to.
pub async fn db_and_events_file() -> (
    outbox_testkit::postgres::TestDb,
    sqlx::PgPool,
    tempfile::TempDir,
    std::path::PathBuf,
) {
    let (db, pool) = outbox_testkit::postgres::migrated_test_db().await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("events.jsonl");
    (db, pool, dir, file)
}

/// Runs `outbox relay --drain`, with `extra` arguments, on the database at
/// `url` publishing to the JSON-lines file `file`; it must succeed.
pub fn drain_to_file(url: &str, file: &Path, extra: &[&str]) {
    let out = bin()
        .env("DATABASE_URL", url)
        .args(["relay", "--drain", "--publisher"])
        .arg(format!("file:{}", file.display()))
        .args(extra)
        .output()
        .expect("run outbox relay --drain");
    assert!(out.status.success(), "drain failed: {}", text(&out.stderr));
}

/// A delivered line: (event id, aggregate id, position). A last line
/// without its newline is one a running relay is still writing (a read can
/// see part of a write): it is left for the next read. Every complete line
/// must parse.
pub fn read_deliveries(file: &Path) -> Vec<(String, String, i64)> {
    let text = std::fs::read_to_string(file).unwrap_or_default();
    let complete = text.rfind('\n').map_or("", |end| &text[..=end]);
    complete
        .lines()
        .map(|line| {
            let v: serde_json::Value =
                serde_json::from_str(line).unwrap_or_else(|e| panic!("corrupt line {line:?}: {e}"));
            (
                v["id"].as_str().unwrap().to_owned(),
                v["aggregate_id"].as_str().unwrap().to_owned(),
                v["payload"]["n"].as_i64().unwrap(),
            )
        })
        .collect()
}

/// Asserts every id in `expected` was delivered, nothing else was, and
/// first deliveries kept per-aggregate order; returns (deliveries,
/// duplicates).
pub fn check_deliveries(file: &Path, expected: &[uuid::Uuid]) -> (usize, usize) {
    let got = read_deliveries(file);
    let got: Vec<(uuid::Uuid, &str, i64)> = got
        .iter()
        .map(|(id, a, n)| (id.parse().expect("an event id"), a.as_str(), *n))
        .collect();
    let dups = outbox_testkit::assert_delivered_once_in_order("", expected, &got);
    (got.len(), dups)
}

/// How long one `outbox relay --drain` of an end-to-end test may take.
pub const DRAIN_DEADLINE: std::time::Duration = std::time::Duration::from_secs(180);

/// Writes `per_aggregate` rounds of one event per aggregate (`agg-0`,
/// `agg-1`, …; type `order`, event type `order.updated`, payload
/// `{"n": round}`, a `traceparent` header) with plain SQL, one statement per
/// round, so positions follow commit order; returns each event's aggregate
/// and position.
pub async fn insert_backlog(
    pool: &sqlx::PgPool,
    aggregates: i64,
    per_aggregate: i64,
) -> std::collections::HashMap<uuid::Uuid, (String, i64)> {
    let mut expected = std::collections::HashMap::new();
    for n in 0..per_aggregate {
        let rows: Vec<(uuid::Uuid, String)> = sqlx::query_as(
            "INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload, headers)
             SELECT 'order', 'agg-' || a, 'order.updated', jsonb_build_object('n', $1::bigint),
                    jsonb_build_object('traceparent', '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01')
             FROM generate_series(0, $2 - 1) AS a
             RETURNING id, aggregate_id",
        )
        .bind(n)
        .bind(aggregates)
        .fetch_all(pool)
        .await
        .expect("inserting a round of events");
        for (id, aggregate) in rows {
            expected.insert(id, (aggregate, n));
        }
    }
    assert_eq!(expected.len(), (aggregates * per_aggregate) as usize);
    expected
}

/// Runs `cmd` (an `outbox relay --drain …` built with [`bin`]) to its end
/// within [`DRAIN_DEADLINE`], and requires exit 0 and an empty outbox
/// afterwards: nothing left pending, nothing dead-lettered. Returns how long
/// it ran and what it printed on stderr.
pub async fn drain(mut cmd: Command, pool: &sqlx::PgPool) -> (std::time::Duration, String) {
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    let started = std::time::Instant::now();
    let child = tokio::process::Command::from(cmd)
        .kill_on_drop(true)
        .spawn()
        .expect("spawn outbox relay");
    let out = tokio::time::timeout(DRAIN_DEADLINE, child.wait_with_output())
        .await
        .unwrap_or_else(|_| panic!("outbox relay --drain did not finish within {DRAIN_DEADLINE:?}"))
        .expect("wait for outbox relay");
    let took = started.elapsed();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        out.status.success(),
        "outbox relay --drain exited with {}\n--- stderr ---\n{stderr}\n--- stdout ---\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout)
    );
    let dead: Vec<(uuid::Uuid, Option<String>)> =
        sqlx::query_as("SELECT id, last_error FROM outbox_dead_letters LIMIT 5")
            .fetch_all(pool)
            .await
            .unwrap();
    assert!(dead.is_empty(), "events were dead-lettered: {dead:?}");
    let left: i64 = sqlx::query_scalar("SELECT count(*) FROM outbox_events")
        .fetch_one(pool)
        .await
        .unwrap();
    assert_eq!(left, 0, "rows left in outbox_events after the drain");
    (took, stderr)
}

/// `outbox relay --drain --publisher SPEC --instance-id INSTANCE` on the
/// database at `url`, through [`drain`]; returns how long it ran.
pub async fn drain_with(
    url: &str,
    pool: &sqlx::PgPool,
    spec: &str,
    instance: &str,
) -> std::time::Duration {
    let mut cmd = bin();
    cmd.env("DATABASE_URL", url)
        .args(["relay", "--drain", "--publisher", spec])
        .args(["--instance-id", instance]);
    drain(cmd, pool).await.0
}

/// `GET path` on `127.0.0.1:port`: (status, body), or `None` if nothing
/// answers within 10 s.
pub async fn http_get(port: u16, path: &str) -> Option<(u16, String)> {
    http_exchange(
        port,
        &format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"),
    )
    .await
}

/// `GET path` on `127.0.0.1:port` as HTTP/1.0 (so a Go server answers
/// without chunking): (status, body), or `None` when nothing answers
/// within 10 s.
pub async fn http10_get(port: u16, path: &str) -> Option<(u16, String)> {
    http_exchange(
        port,
        &format!("GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n"),
    )
    .await
}

/// Sends `request` to `127.0.0.1:port` and reads the answer to its end:
/// (status, body), or `None` when nothing answers within 10 s.
async fn http_exchange(port: u16, request: &str) -> Option<(u16, String)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .ok()?;
    s.write_all(request.as_bytes()).await.ok()?;
    let mut raw = Vec::new();
    tokio::time::timeout(std::time::Duration::from_secs(10), s.read_to_end(&mut raw))
        .await
        .ok()?
        .ok()?;
    let raw = String::from_utf8_lossy(&raw).into_owned();
    let status = raw.split(' ').nth(1)?.parse().ok()?;
    let body = raw.split_once("\r\n\r\n")?.1.to_owned();
    Some((status, body))
}

/// A migrated test database holding one pending event, and the command
/// `outbox relay --publisher spec --instance-id instance` on it, serving
/// HTTP on the free port returned: what an outage test starts from.
pub async fn one_event_relay(
    spec: &str,
    instance: &str,
) -> (outbox_testkit::postgres::TestDb, sqlx::PgPool, Command, u16) {
    let (db, pool) = outbox_testkit::postgres::migrated_test_db().await;
    sqlx::query(
        "INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload)
         VALUES ('order', '1', 'order.created', '{\"n\": 1}')",
    )
    .execute(&pool)
    .await
    .unwrap();
    let http_port = outbox_testkit::process::free_port();
    let mut cmd = bin();
    cmd.env("DATABASE_URL", &db.url)
        .args(["relay", "--publisher", spec])
        .args(["--http-addr", &format!("127.0.0.1:{http_port}")])
        .args(["--instance-id", instance]);
    (db, pool, cmd, http_port)
}

/// Runs `cmd` (an `outbox relay --publisher SPEC --http-addr
/// 127.0.0.1:HTTP_PORT` on a database holding one pending event, `pool`)
/// until `/readyz` answers 503 with a body `outage` accepts (the panic
/// names `what`); then, after `settle` more, requires that no attempt was
/// counted, nothing was dead-lettered and the relay still runs, and that
/// neither `/readyz` nor the relay's stderr shows `secret` or a panic.
/// Returns the `/readyz` body.
pub async fn assert_outage_on_readyz(
    mut cmd: Command,
    pool: &sqlx::PgPool,
    http_port: u16,
    what: &str,
    outage: impl Fn(&str) -> bool,
    secret: &str,
    settle: std::time::Duration,
) -> String {
    use std::time::{Duration, Instant};
    cmd.stdout(Stdio::null()).stderr(Stdio::piped());
    let mut child = tokio::process::Command::from(cmd)
        .kill_on_drop(true)
        .spawn()
        .expect("spawn outbox relay");
    let deadline = Instant::now() + Duration::from_secs(60);
    let body = loop {
        let answer = http_get(http_port, "/readyz").await;
        if let Some((503, body)) = &answer {
            if outage(body) {
                break body.clone();
            }
        }
        if Instant::now() > deadline {
            child.kill().await.unwrap();
            let out = child.wait_with_output().await.unwrap();
            panic!(
                "/readyz did not report {what} within 60 s; last answer: {answer:?}\n--- relay stderr ---\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(!body.contains(secret), "{body}");
    // Let it retry a few times.
    tokio::time::sleep(settle).await;
    let (attempts, dead): (i32, i64) = sqlx::query_as(
        "SELECT (SELECT attempts FROM outbox_events), (SELECT count(*) FROM outbox_dead_letters)",
    )
    .fetch_one(pool)
    .await
    .unwrap();
    assert_eq!(
        (attempts, dead),
        (0, 0),
        "{what}: an outage counts no attempt"
    );
    assert!(
        child.try_wait().unwrap().is_none(),
        "{what}: the relay keeps running through an outage"
    );
    child.kill().await.unwrap();
    let out = child.wait_with_output().await.unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains(secret), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    body
}

/// Runs `outbox config check` (`command` = `"config"`) or `outbox relay`
/// (which stops at the same check) with `OUTBOX_PUBLISHER=spec`, the config
/// file text `file` if any, and `env` (a `None` value removes the
/// variable). The database named for `relay` refuses connections.
pub fn run_settings(
    command: &str,
    spec: &str,
    file: Option<&str>,
    env: &[(&str, Option<&str>)],
) -> Output {
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = bin();
    cmd.env("OUTBOX_PUBLISHER", spec);
    for (k, v) in env {
        match v {
            Some(v) => cmd.env(k, v),
            None => cmd.env_remove(k),
        };
    }
    if let Some(text) = file {
        let path = dir.path().join("outbox.toml");
        std::fs::write(&path, text).unwrap();
        cmd.arg("--config").arg(&path);
    }
    if command == "relay" {
        cmd.env("DATABASE_URL", "postgres://app@127.0.0.1:1/app");
        cmd.arg("relay");
    } else {
        cmd.args(["config", "check"]);
    }
    cmd.output().expect("run outbox")
}

/// Bad publisher settings, as `(spec, extra, words)`: `extra` is what
/// `run` takes beside the spec (a config file's text, a secret), `words`
/// what the error must say.
pub type BadSettings<'a> = &'a [(&'a str, Option<&'a str>, &'a [&'a str])];

/// Runs each case of `cases` with `run(command, spec, extra)` for both
/// `outbox config check` and `outbox relay`, and checks that each fails
/// without a panic, in exactly one line on stderr that holds every one of
/// its words and none of `secrets`. A failure names the command, the spec
/// and the extra (as `extra_name`).
pub fn assert_bad_settings_fail_in_one_line(
    cases: BadSettings<'_>,
    extra_name: &str,
    secrets: &[&str],
    run: impl Fn(&str, &str, Option<&str>) -> Output,
) {
    for command in ["config", "relay"] {
        for (spec, extra, words) in cases {
            let out = run(command, spec, *extra);
            let stderr = String::from_utf8_lossy(&out.stderr);
            let what = format!("outbox {command} with {spec:?}, {extra_name} {extra:?}");
            assert!(!out.status.success(), "{what} succeeded: {stderr}");
            assert!(!stderr.contains("panicked"), "{what} panicked: {stderr}");
            assert_eq!(
                stderr.trim().lines().count(),
                1,
                "{what}: one line: {stderr}"
            );
            for w in *words {
                assert!(stderr.contains(w), "{what}: {w:?} missing in {stderr}");
            }
            for secret in secrets {
                assert!(
                    !stderr.contains(secret),
                    "{what} printed a secret: {stderr}"
                );
            }
        }
    }
}

/// Checks that a `config check` run of `spec` passed; returns its stdout.
pub fn assert_config_passes(spec: &str, out: &Output) -> String {
    assert!(
        out.status.success(),
        "{spec}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `outbox --config CONFIG relay --instance-id INSTANCE` with `extra`
/// arguments: its standard output thrown away, its log (JSON lines)
/// appended to the file `log`, so a chatty relay never blocks on a pipe
/// nobody reads and the log can be read after it is gone.
pub fn spawn_relay_with_config(config: &Path, instance: &str, log: &Path, extra: &[&str]) -> Child {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .expect("open the relay's log file");
    bin()
        .env_remove("OUTBOX_CONFIG")
        .arg("--config")
        .arg(config)
        .args(["relay", "--instance-id", instance, "--log-format", "json"])
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::from(log))
        .spawn()
        .expect("spawn outbox relay")
}

/// Sends `child` SIGTERM and waits up to `within` for it to exit: its exit
/// status, or `None` (then it was killed) when it did not stop in time.
pub fn stop_gracefully(
    child: &mut Child,
    within: std::time::Duration,
) -> Option<std::process::ExitStatus> {
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let deadline = std::time::Instant::now() + within;
    loop {
        if let Some(status) = child.try_wait().expect("wait for the relay") {
            return Some(status);
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// The JSON lines a relay wrote, `lines`, against what was stored,
/// `expected` (each event's id, payload as PostgreSQL prints it, number of
/// headers): one line per `what`, each payload byte for byte, no header
/// dropped.
pub fn assert_lines_as_stored<'a>(
    lines: impl Iterator<Item = &'a str>,
    expected: &[(uuid::Uuid, String, usize)],
    what: &str,
) {
    #[derive(serde::Deserialize)]
    struct Line<'a> {
        id: uuid::Uuid,
        #[serde(borrow)]
        payload: &'a serde_json::value::RawValue,
        headers: std::collections::BTreeMap<String, String>,
    }
    let lines: Vec<Line> = lines
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    assert_eq!(lines.len(), expected.len(), "one line per {what}");
    for (id, payload, headers) in expected {
        let line = lines
            .iter()
            .find(|l| l.id == *id)
            .expect("a line per event");
        assert_eq!(line.payload.get(), payload, "payload byte for byte");
        assert_eq!(line.headers.len(), *headers, "no header dropped: {id}");
    }
}

/// The one `error` line a failed command printed (it must have failed, and
/// printed exactly one).
pub fn one_error_line(out: &Output) -> String {
    assert!(!out.status.success(), "should have failed");
    let err = text(&out.stderr);
    let errors: Vec<&str> = err.lines().filter(|l| l.starts_with("error")).collect();
    assert_eq!(errors.len(), 1, "one error line: {err}");
    errors[0].to_owned()
}

/// `outbox relay` on `url`, publishing to a file of its own, run to its end.
pub fn relay_to_a_file(url: &str) -> Output {
    let dir = tempfile::tempdir().unwrap();
    bin()
        .env("DATABASE_URL", url)
        .args(["relay", "--publisher"])
        .arg(format!("file:{}", dir.path().join("e.jsonl").display()))
        .output()
        .unwrap()
}
