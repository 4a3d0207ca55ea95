//! Graceful shutdown of `outbox relay` as a child process: SIGTERM under
//! load finishes and acknowledges the in-flight batch, releases the
//! partitions and exits 0, so restarts lose nothing and duplicate nothing,
//! and another instance takes the partitions over at once; a relay that
//! cannot finish still exits within `shutdown_timeout_secs`.

mod common;

use std::io::Read;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use outbox::Outbox;
use outbox_testkit::postgres::test_db;
use outbox_testkit::wait_until;
use sqlx::PgPool;
use tokio::task::JoinHandle;
use uuid::Uuid;

async fn migrated(pool: &PgPool) {
    let mut conn = pool.acquire().await.unwrap();
    outbox::migrate(&mut conn, &Default::default(), &Default::default())
        .await
        .unwrap();
}

/// Writes `rounds` rounds of one event per aggregate, one transaction per
/// round, numbered from `first`; returns the ids in enqueue order.
fn produce(pool: &PgPool, aggs: i64, first: i64, rounds: i64) -> (Vec<Uuid>, JoinHandle<()>) {
    let plan: Vec<Vec<_>> = (first..first + rounds)
        .map(|n| {
            (0..aggs)
                .map(|a| common::event(&format!("agg-{a}"), n))
                .collect()
        })
        .collect();
    let ids = plan.iter().flatten().map(|e| e.id).collect();
    let pool = pool.clone();
    let task = tokio::spawn(async move {
        let outbox = Outbox::new();
        for round in plan {
            outbox.enqueue_many(&pool, &round).await.unwrap();
            // Spread the load over the restarts.
            tokio::time::sleep(Duration::from_millis(15)).await;
        }
    });
    (ids, task)
}

async fn pending(pool: &PgPool) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM outbox_events WHERE dead_lettered_at IS NULL")
        .fetch_one(pool)
        .await
        .unwrap()
}

async fn held_by(pool: &PgPool, instance: &str) -> i64 {
    sqlx::query_scalar(
        "SELECT count(*) FROM outbox_partitions WHERE owner = $1 AND lease_until > now()",
    )
    .bind(instance)
    .fetch_one(pool)
    .await
    .unwrap()
}

fn sigterm(child: &Child) {
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
}

/// Waits up to `limit` for `child` to exit.
async fn exit_of(child: &mut Child, limit: Duration) -> ExitStatus {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        assert!(Instant::now() < deadline, "no exit within {limit:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn stderr_of(child: &mut Child) -> String {
    let mut err = String::new();
    if let Some(mut pipe) = child.stderr.take() {
        let _ = pipe.read_to_string(&mut err);
    }
    err
}

/// `outbox relay` publishing to `file` with a lease of `lease_ms`.
fn spawn_relay(url: &str, file: &Path, instance: &str, lease_ms: u64) -> Child {
    common::bin()
        .env("DATABASE_URL", url)
        .args(["relay", "--instance-id", instance, "--batch-size", "200"])
        .args(["--lease-ms", &lease_ms.to_string(), "--poll-max-ms", "50"])
        .arg("--publisher")
        .arg(format!("file:{}", file.display()))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn graceful_restarts_under_load_lose_nothing_and_duplicate_nothing() {
    let db = test_db().await;
    let pool = db.pool().await;
    migrated(&pool).await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("events.jsonl");

    // A backlog, then producers writing all through the restarts.
    let (mut all, backlog) = produce(&pool, 100, 0, 20);
    backlog.await.unwrap();
    let (live, producer) = produce(&pool, 100, 20, 150);
    all.extend(live);

    let mut stopped_mid_run = 0;
    for round in 0..6 {
        let before = common::read_deliveries(&file).len();
        let mut relay = spawn_relay(&db.url, &file, "steady", 1_500);
        wait_until("the relay to deliver", Duration::from_secs(60), || async {
            common::read_deliveries(&file).len() >= before + 150
                || (producer.is_finished() && pending(&pool).await == 0)
        })
        .await;
        sigterm(&relay);
        let status = exit_of(&mut relay, Duration::from_secs(30)).await;
        let err = stderr_of(&mut relay);
        assert_eq!(status.code(), Some(0), "round {round}: {err}");
        assert!(
            err.contains("SIGTERM") && err.contains("relay stopped"),
            "{err}"
        );
        let left = pending(&pool).await;
        if left > 0 {
            stopped_mid_run += 1;
        }
        eprintln!(
            "round {round}: {} lines, {left} pending",
            common::read_deliveries(&file).len()
        );
    }
    producer.await.unwrap();
    assert!(
        stopped_mid_run >= 4,
        "stops must land under load ({stopped_mid_run})"
    );

    common::drain_to_file(&db.url, &file, &["--instance-id", "drainer"]);
    let (lines, dups) = common::check_deliveries(&file, &all);
    assert_eq!(all.len(), 17_000);
    assert_eq!(
        (lines, dups),
        (all.len(), 0),
        "graceful stops never duplicate"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_instance_hands_its_partitions_over_at_once() {
    const LEASE_MS: u64 = 15_000;
    let db = test_db().await;
    let pool = db.pool().await;
    migrated(&pool).await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("events.jsonl");
    let (ids, producer) = produce(&pool, 60, 0, 200);
    let mut alpha = spawn_relay(&db.url, &file, "alpha", LEASE_MS);
    wait_until(
        "alpha to hold every partition",
        Duration::from_secs(30),
        || async { held_by(&pool, "alpha").await == 32 },
    )
    .await;
    let mut beta = spawn_relay(&db.url, &file, "beta", LEASE_MS);
    wait_until(
        "alpha and beta to share",
        Duration::from_secs(60),
        || async { held_by(&pool, "beta").await > 0 && held_by(&pool, "alpha").await > 0 },
    )
    .await;

    sigterm(&alpha);
    let stopped = Instant::now();
    let status = exit_of(&mut alpha, Duration::from_secs(30)).await;
    assert_eq!(status.code(), Some(0), "{}", stderr_of(&mut alpha));
    wait_until(
        "beta to hold every partition",
        Duration::from_secs(30),
        || async { held_by(&pool, "beta").await == 32 },
    )
    .await;
    let took = stopped.elapsed();
    // alpha renewed its leases at most a third of a lease before the
    // signal: waiting for them to expire would take two thirds at least.
    assert!(
        took < Duration::from_millis(LEASE_MS * 2 / 3 - 500),
        "beta took {took:?}: it waited for the leases to expire"
    );
    eprintln!("beta held all partitions {took:?} after alpha's SIGTERM");

    producer.await.unwrap();
    wait_until("beta to catch up", Duration::from_secs(60), || async {
        pending(&pool).await == 0
    })
    .await;
    sigterm(&beta);
    assert_eq!(
        exit_of(&mut beta, Duration::from_secs(30)).await.code(),
        Some(0)
    );
    let (lines, dups) = common::check_deliveries(&file, &ids);
    assert_eq!(
        (lines, dups),
        (ids.len(), 0),
        "a graceful hand-over duplicates nothing"
    );
}

/// Whether a thread of process `pid` is blocked writing to a pipe.
fn blocked_on_a_pipe(pid: u32) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return false;
    };
    tasks
        .flatten()
        .any(|t| std::fs::read_to_string(t.path().join("wchan")).is_ok_and(|w| w.contains("pipe")))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relay_that_cannot_finish_still_exits_by_its_deadline() {
    let db = test_db().await;
    let pool = db.pool().await;
    migrated(&pool).await;
    let (_, producer) = produce(&pool, 50, 0, 40);
    producer.await.unwrap();

    // Standard output into a pipe nobody reads: once it is full, the
    // publisher's write blocks in the kernel, where no timeout can reach it.
    // (`file:` refuses FIFOs, so the stdout publisher is the one to block.)
    let mut relay = common::bin()
        .env("DATABASE_URL", &db.url)
        .args([
            "relay",
            "--batch-size",
            "100",
            "--shutdown-timeout-secs",
            "1",
            "--publisher",
            "stdout",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let _unread = relay.stdout.take().unwrap();
    let err = Arc::new(Mutex::new(String::new()));
    let reader = {
        let err = err.clone();
        let mut pipe = relay.stderr.take().unwrap();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = pipe.read(&mut buf) {
                if n == 0 {
                    break;
                }
                err.lock()
                    .unwrap()
                    .push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        })
    };
    let pid = relay.id();
    wait_until(
        "the publisher to block",
        Duration::from_secs(30),
        || async move { blocked_on_a_pipe(pid) },
    )
    .await;

    sigterm(&relay);
    let signalled = Instant::now();
    let status = exit_of(&mut relay, Duration::from_secs(15)).await;
    let took = signalled.elapsed();
    reader.join().unwrap();
    let err = err.lock().unwrap().clone();
    assert_eq!(status.code(), Some(1), "{err}");
    assert!(
        took >= Duration::from_secs(1),
        "it waited for the deadline: {took:?}"
    );
    assert!(
        took < Duration::from_secs(5),
        "it kept the deadline: {took:?}"
    );
    let errors: Vec<&str> = err.lines().filter(|l| l.starts_with("error: ")).collect();
    assert_eq!(errors.len(), 1, "{err}");
    assert!(
        errors[0].contains("did not stop within shutdown_timeout_secs = 1")
            && errors[0].contains("--shutdown-timeout-secs"),
        "{err}"
    );
}
