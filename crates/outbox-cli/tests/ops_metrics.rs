//! What `outbox relay` reports while it runs: `/metrics` scraped over HTTP
//! during a real run and checked against the database, and the progress
//! line of `--drain` (drawn on a terminal, silent otherwise).

mod common;
mod console_support;

use common::http_get as get;

use std::collections::BTreeMap;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use outbox::Outbox;
use outbox_testkit::postgres::free_port;
use outbox_testkit::wait_until;
use sqlx::PgPool;

/// Every sample of a scrape, by series (`name{labels}`), the label of
/// the relay's one source (`source="public"`, its schema) left out.
fn samples(body: &str) -> BTreeMap<String, f64> {
    body.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            let series = series
                .replace("{source=\"public\"}", "")
                .replace(",source=\"public\"}", "}")
                .replace("{source=\"public\",", "{");
            Some((series, value.parse().ok()?))
        })
        .collect()
}

/// `promtool check metrics` on `body`, which must pass; nothing without
/// promtool.
fn promtool_check_metrics(body: &str) {
    if let Some(Err(said)) = outbox_testkit::promtool::check_metrics(body) {
        panic!("promtool check metrics ({said})\n{body}");
    }
}

async fn scrape(port: u16) -> Option<BTreeMap<String, f64>> {
    match get(port, "/metrics").await? {
        (200, body) => Some(samples(&body)),
        _ => None,
    }
}

async fn migrated_db() -> (String, PgPool) {
    let (db, pool) = outbox_testkit::postgres::migrated_test_db().await;
    (db.url, pool)
}

async fn count(pool: &PgPool, sql: &str) -> i64 {
    sqlx::query_scalar(sql).fetch_one(pool).await.unwrap()
}

fn sigterm_and_wait(child: &mut Child) -> Option<i32> {
    let pid = child.id().to_string();
    Command::new("kill").args(["-TERM", &pid]).status().unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status.code();
        }
        assert!(
            Instant::now() < deadline,
            "the relay did not exit after SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_scraped_during_a_run_match_the_database() {
    let (url, pool) = migrated_db().await;
    let outbox = Outbox::new();
    let first: Vec<_> = (0..1200)
        .map(|n| common::event(&format!("m{}", n % 40), n))
        .collect();
    outbox.enqueue_many(&pool, &first).await.unwrap();
    // Three dead letters left by an earlier run.
    sqlx::query(
        "INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload, dead_lettered_at, last_error)
         SELECT 'order', 'dead-' || g, 'order.poison', '{}', now(), 'rejected' FROM generate_series(1, 3) g",
    )
    .execute(&pool)
    .await
    .unwrap();

    let dir = tempfile::tempdir().unwrap();
    let sink = dir.path().join("events.jsonl");
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let mut relay = common::bin()
        .env("DATABASE_URL", &url)
        .env("OUTBOX_HTTP_REFRESH_MS", "100")
        .args([
            "relay",
            "--instance-id",
            "metered",
            "--batch-size",
            "100",
            "--poll-max-ms",
            "50",
        ])
        .args([
            "--publisher",
            &format!("file:{}", sink.display()),
            "--http-addr",
            &addr,
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();

    // Scrape while it works: the counter only ever grows.
    let mut seen = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(m) = scrape(port).await {
            let published = m["outbox_events_published_total"];
            seen.push(published);
            if published >= 1200.0 {
                break;
            }
        }
        assert!(
            Instant::now() < deadline,
            "not all published in time: {seen:?}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(seen.windows(2).all(|w| w[0] <= w[1]), "{seen:?}");

    // More events while it runs.
    let second: Vec<_> = (0..300)
        .map(|n| common::event(&format!("m{}", n % 40), 2000 + n))
        .collect();
    outbox.enqueue_many(&pool, &second).await.unwrap();
    wait_until(
        "the database gauges to catch up",
        Duration::from_secs(60),
        || async {
            scrape(port).await.is_some_and(|m| {
                m["outbox_events_published_total"] == 1500.0 && m["outbox_events_pending"] == 0.0
            })
        },
    )
    .await;

    let m = scrape(port).await.unwrap();
    let live = count(
        &pool,
        "SELECT count(*) FROM outbox_events WHERE dead_lettered_at IS NULL",
    )
    .await;
    let dead = count(
        &pool,
        "SELECT count(*) FROM outbox_events WHERE dead_lettered_at IS NOT NULL",
    )
    .await;
    let lines = common::read_deliveries(&sink).len();
    assert_eq!(live, 0, "everything live was delivered (and deleted)");
    assert_eq!(m["outbox_events_published_total"], lines as f64);
    assert_eq!(m["outbox_events_pending"], live as f64);
    assert_eq!(m["outbox_dead_letters"], dead as f64);
    assert_eq!(dead, 3);
    assert_eq!(m["outbox_oldest_pending_age_seconds"], 0.0);
    assert_eq!(m["outbox_commit_to_ack_seconds_count"], 1500.0);
    assert_eq!(
        m["outbox_commit_to_ack_seconds_bucket{le=\"+Inf\"}"],
        1500.0
    );
    assert!(m["outbox_commit_to_ack_seconds_sum"] > 0.0);
    assert!(m["outbox_batches_total"] >= 15.0, "batches of at most 100");
    assert_eq!(
        m["outbox_batch_duration_seconds_count"],
        m["outbox_batches_total"]
    );
    assert_eq!(m["outbox_partitions_owned"], 32.0);
    assert_eq!(m["outbox_partitions"], 32.0);
    assert_eq!(m["outbox_database_up"], 1.0);
    assert_eq!(m["outbox_events_dead_lettered_total"], 0.0);
    for reason in ["retry", "unavailable", "database"] {
        assert_eq!(
            m[&format!("outbox_retries_total{{reason=\"{reason}\"}}")],
            0.0
        );
    }
    // No event ids or aggregate ids as labels.
    let body = get(port, "/metrics").await.unwrap().1;
    assert!(!body.contains(&first[0].id.to_string()) && !body.contains("aggregate_id"));
    assert!(body.ends_with("# EOF\n"));
    // Every series but the relay's identity is its one source's, named
    // after its schema.
    for line in body.lines().filter(|l| !l.starts_with('#')) {
        assert!(
            line.starts_with("outbox_relay_info{") || line.contains("source=\"public\""),
            "{line}"
        );
    }
    promtool_check_metrics(&body);

    assert_eq!(sigterm_and_wait(&mut relay), Some(0));
}

/// Runs `outbox relay --drain` on `url` under a terminal (`script` gives
/// it one); returns what the terminal showed.
fn drain_on_a_terminal(url: &str, sink: &std::path::Path) -> String {
    let command = format!(
        "{} relay --drain --batch-size 50 --publisher file:{}",
        env!("CARGO_BIN_EXE_outbox"),
        sink.display()
    );
    let out = Command::new("script")
        .args(["-q", "-e", "-c", &command, "/dev/null"])
        .env("DATABASE_URL", url)
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .output()
        .expect("run script (util-linux)");
    let shown = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{shown}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    shown
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drain_progress_is_drawn_on_a_terminal_and_silent_in_a_pipe() {
    let (url, pool) = migrated_db().await;
    let outbox = Outbox::new();
    let batch = |from: i64| -> Vec<_> {
        (from..from + 3000)
            .map(|n| common::event(&format!("p{}", n % 30), n))
            .collect()
    };
    let dir = tempfile::tempdir().unwrap();

    outbox.enqueue_many(&pool, &batch(0)).await.unwrap();
    let sink = dir.path().join("piped.jsonl");
    let out = common::bin()
        .env("DATABASE_URL", &url)
        .args(["relay", "--drain", "--batch-size", "50"])
        .args(["--publisher", &format!("file:{}", sink.display())])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains("relay: drained; delivered 3000 events"),
        "{err}"
    );
    assert!(
        !err.contains('\r') && !err.contains("\x1b["),
        "no progress or colours in a pipe: {err:?}"
    );
    assert!(!err.contains("events done"), "{err}");

    outbox.enqueue_many(&pool, &batch(10_000)).await.unwrap();
    let shown = drain_on_a_terminal(&url, &dir.path().join("tty.jsonl"));
    assert!(
        shown.contains("\r\x1b[2Krelay:"),
        "redrawn in place: {shown:?}"
    );
    assert!(
        shown.contains("events done") && shown.contains("pending"),
        "{shown:?}"
    );
    assert!(
        shown.contains("relay: drained; delivered 3000 events"),
        "{shown:?}"
    );
}

/// `/metrics`, `outbox status` and the console read one definition of the
/// oldest claimable event's age: on the same database they give the same
/// answer — 0 ("-") for an event held by a pause, which is not late, and
/// one age (within the seconds between their reads) for one that waits
/// while the broker is down.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_status_and_the_console_agree_on_the_oldest_claimable_age() {
    let (url, pool) = migrated_db().await;
    sqlx::query("INSERT INTO outbox_pauses (aggregate_type) VALUES ('order')")
        .execute(&pool)
        .await
        .unwrap();
    sqlx::query(
        "INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload, created_at)
         VALUES ('order', 'a', 'order.created', '{}', now() - interval '60 seconds')",
    )
    .execute(&pool)
    .await
    .unwrap();
    let port = free_port();
    // A broker that refuses every connection: an outage, no attempt
    // counted, the event stays claimable once the pause is lifted.
    let dead_broker = format!("http://127.0.0.1:{}/hook", free_port());
    let mut relay = common::bin()
        .env("DATABASE_URL", &url)
        .env("OUTBOX_HTTP_REFRESH_MS", "100")
        .env(
            "OUTBOX_PUBLISHER_HTTP_SECRET",
            "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
        )
        .args(["relay", "--instance-id", "agree", "--poll-max-ms", "50"])
        .args(["--publisher", &dead_broker, "--http-addr"])
        .arg(format!("127.0.0.1:{port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let console = console_support::start(&url, &[], &[]);
    let c = console_support::client();
    let status = || {
        let out = common::run(&["status", "--json"], Some(&url));
        assert!(out.status.success(), "{}", common::text(&out.stderr));
        serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()
    };
    let overview = || async {
        let (code, json) = console_support::get(&c, &console, "/overview.json").await;
        assert_eq!(code, 200, "{json}");
        serde_json::from_str::<serde_json::Value>(&json).unwrap()
    };
    let metric = || async {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(m) = scrape(port).await {
                if let Some(v) = m.get("outbox_oldest_claimable_age_seconds") {
                    return *v;
                }
            }
            assert!(Instant::now() < deadline, "no claimable age in /metrics");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    // Paused: nothing is late, whoever is asked.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(metric().await, 0.0, "/metrics");
    let s = status();
    assert_eq!(s["oldest_claimable_age_seconds"], 0.0, "{s}");
    assert_eq!(s["paused"], serde_json::json!(["order"]), "{s}");
    let o = overview().await;
    assert_eq!(o["oldest_claimable"], "-", "{o}");
    // Resumed with the broker down: one age, about a minute, everywhere.
    sqlx::query("DELETE FROM outbox_pauses")
        .execute(&pool)
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let from_metrics = metric().await;
    let from_status = status()["oldest_claimable_age_seconds"].as_f64().unwrap();
    let shown = overview().await["oldest_claimable"]
        .as_str()
        .unwrap()
        .to_owned();
    for (who, age) in [("/metrics", from_metrics), ("outbox status", from_status)] {
        assert!((59.0..75.0).contains(&age), "{who}: {age}");
    }
    assert!(
        (from_metrics - from_status).abs() < 5.0,
        "{from_metrics} vs {from_status}"
    );
    assert!(shown.starts_with("1 min "), "{shown}");
    let _ = sigterm_and_wait(&mut relay);
}
