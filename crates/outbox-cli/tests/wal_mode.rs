//! The WAL mode as users run it: `outbox migrate --mode wal`, producers
//! calling `outbox_emit` by plain SQL from another process, and `outbox
//! relay` processes reading the slot — two of them, SIGKILLed ten times and
//! PostgreSQL restarted twice mid-stream — with nothing lost and nothing
//! reordered; and each setup the mode cannot run on refused in one line
//! that names the fix, with nothing changed.

mod common;

use std::path::Path;
use std::process::Child;
use std::time::{Duration, Instant};

use outbox_testkit::postgres::{PgCluster, PgOptions};
use rand::Rng;
use sqlx::PgPool;

/// A cluster of its own (the tests restart it), with `wal_level = logical`.
fn logical_cluster(extra: &[(&str, &str)]) -> PgCluster {
    outbox_testkit::postgres::logical_cluster(extra)
}

fn migrate_wal(url: &str) -> std::process::Output {
    common::run(&["migrate", "--mode", "wal"], Some(url))
}

/// One round: event `n` of each of `aggregates` aggregates, emitted by
/// plain SQL in one transaction; the ids in order.
async fn emit_round(pool: &PgPool, aggregates: i64, n: i64) -> sqlx::Result<Vec<uuid::Uuid>> {
    sqlx::query_scalar(
        "SELECT outbox_emit('order', 'agg-' || a, 'order.updated', jsonb_build_object('n', $1::bigint))
         FROM generate_series(0, $2 - 1) AS a",
    )
    .bind(n)
    .bind(aggregates)
    .fetch_all(pool)
    .await
}

fn spawn(url: &str, file: &Path, instance: &str) -> Child {
    common::spawn_relay(url, file, instance, &[])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkills_and_postgres_restarts_lose_nothing_and_reorder_nothing_with_two_relays() {
    let mut cluster = tokio::task::spawn_blocking(|| logical_cluster(&[]))
        .await
        .unwrap();
    let url = cluster.url();
    let out = migrate_wal(&url);
    assert!(out.status.success(), "{}", common::text(&out.stderr));
    let said = common::text(&out.stdout);
    assert!(said.contains("outbox_emit"), "{said}");
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(2)
        .connect(&url)
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("events.jsonl");

    // 200 aggregates x 100 rounds = 20,000 events, in three phases; the
    // relays are SIGKILLed during the first two, PostgreSQL restarted
    // between phases (while the relays still stream the backlog).
    let (aggregates, rounds) = (200, 100);
    let mut expected = Vec::new();
    let mut relays = [spawn(&url, &file, "wal-a"), spawn(&url, &file, "wal-b")];
    let mut kills = 0;
    let mut n = 0;
    for phase in 0..3 {
        let until = if phase == 2 {
            rounds
        } else {
            (phase + 1) * rounds / 3
        };
        let mut next_kill = Instant::now() + Duration::from_millis(150);
        while n < until {
            expected.extend(emit_round(&pool, aggregates, n).await.unwrap());
            n += 1;
            tokio::time::sleep(Duration::from_millis(15)).await;
            if phase < 2 && kills < 10 && Instant::now() >= next_kill {
                let which = kills % 2;
                relays[which].kill().unwrap(); // SIGKILL
                relays[which].wait().unwrap();
                let got = common::read_deliveries(&file);
                let distinct: std::collections::HashSet<&str> =
                    got.iter().map(|(i, _, _)| i.as_str()).collect();
                eprintln!(
                    "kill {kills}: {} lines, {} distinct",
                    got.len(),
                    distinct.len()
                );
                relays[which] = spawn(&url, &file, if which == 0 { "wal-a" } else { "wal-b" });
                kills += 1;
                next_kill =
                    Instant::now() + Duration::from_millis(rand::rng().random_range(80..250));
            }
        }
        if phase < 2 {
            let got = common::read_deliveries(&file);
            let distinct: std::collections::HashSet<&str> =
                got.iter().map(|(i, _, _)| i.as_str()).collect();
            eprintln!(
                "before restart {phase}: {} lines, {} distinct",
                got.len(),
                distinct.len()
            );
            cluster = tokio::task::spawn_blocking(move || {
                cluster.restart().expect("restart PostgreSQL");
                cluster
            })
            .await
            .unwrap();
        }
    }
    while kills < 10 {
        let which = kills % 2;
        relays[which].kill().unwrap();
        relays[which].wait().unwrap();
        relays[which] = spawn(&url, &file, if which == 0 { "wal-a" } else { "wal-b" });
        kills += 1;
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
    assert_eq!(expected.len(), 20_000);
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let got = common::read_deliveries(&file);
        let ids: std::collections::HashSet<&str> = got.iter().map(|(i, _, _)| i.as_str()).collect();
        if ids.len() >= expected.len() || Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    for mut relay in relays {
        let _ = relay.kill();
        let _ = relay.wait();
    }
    let (lines, dups) = common::check_deliveries(&file, &expected);
    eprintln!(
        "{} events, {lines} lines, {dups} duplicates, {kills} kills, 2 restarts",
        expected.len()
    );
    // A kill repeats at most what was published and not yet confirmed to
    // the server: the batch in flight and the one confirmed within the
    // last status interval (2 x --batch-size 200); a restart the same.
    assert!(
        dups <= 12 * common::IN_FLIGHT_WINDOW,
        "{dups} duplicates after {kills} kills and 2 restarts"
    );
    let rows: i64 = sqlx::query_scalar("SELECT count(*) FROM outbox_events")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(rows, 0, "the WAL mode wrote no row");
}

/// The first line of what `out` printed on stderr, which must be its only
/// error line, and the exit must be non-zero.
fn one_line_error(out: &std::process::Output) -> String {
    common::one_error_line(out)
}

async fn slots(url: &str) -> i64 {
    let pool = sqlx::PgPool::connect(url).await.unwrap();
    sqlx::query_scalar("SELECT count(*) FROM pg_replication_slots WHERE slot_name LIKE 'outbox%'")
        .fetch_one(&pool)
        .await
        .unwrap()
}

#[tokio::test]
async fn wal_level_replica_and_no_free_slot_are_refused_in_one_line_with_the_fix() {
    let replica = tokio::task::spawn_blocking(|| {
        PgCluster::start_with(PgOptions {
            extra_conf: vec![("wal_level".into(), "replica".into())],
            ..PgOptions::default()
        })
        .unwrap()
    })
    .await
    .unwrap();
    let line = one_line_error(&migrate_wal(&replica.url()));
    assert!(
        line.contains("wal_level = logical") && line.contains("ALTER SYSTEM"),
        "{line}"
    );
    let out = common::run(&["status"], Some(&replica.url()));
    assert!(
        !out.status.success(),
        "nothing was migrated: {}",
        common::text(&out.stdout)
    );

    let full = tokio::task::spawn_blocking(|| logical_cluster(&[("max_replication_slots", "1")]))
        .await
        .unwrap();
    let pool = sqlx::PgPool::connect(&full.url()).await.unwrap();
    sqlx::query("SELECT pg_create_logical_replication_slot('someone_else', 'test_decoding')")
        .execute(&pool)
        .await
        .unwrap();
    let line = one_line_error(&migrate_wal(&full.url()));
    assert!(
        line.contains("max_replication_slots") && line.contains("pg_drop_replication_slot"),
        "{line}"
    );
    assert_eq!(slots(&full.url()).await, 0, "no slot created");
}

#[tokio::test]
async fn a_relay_whose_role_may_not_replicate_exits_in_one_line_naming_alter_role() {
    let cluster = tokio::task::spawn_blocking(|| logical_cluster(&[]))
        .await
        .unwrap();
    let out = migrate_wal(&cluster.url());
    assert!(out.status.success(), "{}", common::text(&out.stderr));
    let pool = sqlx::PgPool::connect(&cluster.url()).await.unwrap();
    for sql in [
        "CREATE ROLE app LOGIN NOREPLICATION",
        "GRANT ALL ON SCHEMA public TO app",
        "GRANT ALL ON ALL TABLES IN SCHEMA public TO app",
        "GRANT ALL ON ALL SEQUENCES IN SCHEMA public TO app",
    ] {
        sqlx::query(sql).execute(&pool).await.unwrap();
    }
    let url = format!("postgres://app@127.0.0.1:{}/postgres", cluster.port());
    let dir = tempfile::tempdir().unwrap();
    let out = common::bin()
        .env("DATABASE_URL", &url)
        .args(["relay", "--publisher"])
        .arg(format!("file:{}", dir.path().join("e.jsonl").display()))
        .output()
        .unwrap();
    let line = one_line_error(&out);
    assert!(line.contains("ALTER ROLE app REPLICATION"), "{line}");
}

/// Every figure `keys` names in `v` is a finite number above zero.
fn assert_positive(v: &serde_json::Value, keys: &[&str]) {
    for k in keys {
        let x = v[k].as_f64().unwrap_or(f64::NAN);
        assert!(x.is_finite() && x > 0.0, "{k} in {v}");
    }
}

/// The WAL mode's benchmarks run end to end at a small size on a server
/// with `wal_level = logical`; speed is not asserted (shared machines are
/// noisy), the figures must be present and sane.
#[tokio::test]
async fn the_wal_modes_benchmarks_report_every_figure() {
    let cluster = tokio::task::spawn_blocking(|| logical_cluster(&[]))
        .await
        .unwrap();
    let url = cluster.url();
    let (v, _) = common::bench_json(&url, "drain --mode wal --events 3000 --aggregates 100");
    assert_positive(
        &v,
        &[
            "recvlogical_events_per_sec",
            "wal_relay_events_per_sec",
            "table_relay_events_per_sec",
            "ratio_to_recvlogical",
            "ratio_to_table",
            "wal_relay_peak_rss_mib",
            "wal_relay_process_us_per_event",
            "table_relay_process_us_per_event",
        ],
    );
    let (v, _) = common::bench_json(
        &url,
        "latency --mode wal --producer sql --rate 50 --seconds 2",
    );
    assert_eq!(v["mode"], "wal", "{v}");
    assert_eq!(v["delivered"], 100, "{v}");
    // pg_recvlogical ran the same schedule as the reference.
    assert_positive(
        &v["reference"],
        &["process_us_per_event", "walsender_us_per_event"],
    );
    // Through a webhook receiver, read back: every event, in order.
    let (v, _) = common::bench_json(
        &url,
        "e2e --mode wal --publisher http --events 2000 --aggregates 50 --rate 200 --seconds 2 --idle-secs 1",
    );
    assert_eq!(v["mode"], "wal", "{v}");
    assert_eq!(v["drain"]["delivered"], 2000, "{v}");
    assert_eq!(v["drain"]["out_of_order"], 0, "{v}");
    let run = &v["latency"][0];
    assert_eq!(
        (&run["delivered"], &run["out_of_order"]),
        (&serde_json::json!(400), &serde_json::json!(0)),
        "{run}"
    );
    let (v, _) = common::bench_json(&url, "produce --producers 1 --seconds 1");
    let row = &v["by_producers"][0];
    assert_positive(
        row,
        &[
            "emit_tps",
            "emit_relay_tps",
            "w_over_s",
            "w_over_m",
            "x_over_s",
            "x_over_m",
        ],
    );
    let pool = sqlx::PgPool::connect(&url).await.unwrap();
    assert_eq!(slots(&url).await, 0, "the benchmarks leave no slot behind");
    drop(pool);
}

/// The hostile payloads and headers of the publishers' conformance suite,
/// and a 5 MB payload, emitted through `outbox_emit` by plain SQL: `outbox
/// relay` delivers every payload byte for byte as PostgreSQL prints it,
/// and every header.
#[tokio::test]
async fn hostile_payloads_and_headers_arrive_as_stored_through_outbox_emit() {
    use outbox_testkit::conformance::{HOSTILE_HEADERS, HOSTILE_PAYLOADS};
    let cluster = tokio::task::spawn_blocking(|| logical_cluster(&[]))
        .await
        .unwrap();
    let url = cluster.url();
    let out = migrate_wal(&url);
    assert!(out.status.success(), "{}", common::text(&out.stderr));
    let pool = sqlx::PgPool::connect(&url).await.unwrap();
    let mut cases: Vec<(String, String, String)> = Vec::new();
    for (i, (_, payload)) in HOSTILE_PAYLOADS.iter().enumerate() {
        cases.push((format!("p{i}"), payload.to_string(), "'{}'".into()));
    }
    for (i, (_, headers)) in HOSTILE_HEADERS.iter().enumerate() {
        cases.push((format!("h{i}"), r#"'{"n": 1}'"#.into(), headers.to_string()));
    }
    cases.push((
        "big".into(),
        "jsonb_build_object('blob', repeat('y', 5000000))".into(),
        "'{}'".into(),
    ));
    let mut expected = Vec::new();
    for (aggregate, payload, headers) in &cases {
        let (id, text, heads): (uuid::Uuid, String, i64) = sqlx::query_as(&format!(
            "SELECT outbox_emit('order', '{aggregate}', 'odd', {payload}, {headers}),
                    ({payload})::jsonb::text, (SELECT count(*) FROM jsonb_object_keys({headers}))"
        ))
        .fetch_one(&pool)
        .await
        .unwrap_or_else(|e| panic!("{aggregate}: {e}"));
        expected.push((id, text, heads));
    }
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("out.jsonl");
    let mut relay = spawn(&url, &file, "hostile");
    let deadline = Instant::now() + Duration::from_secs(60);
    let lines = loop {
        let text = std::fs::read_to_string(&file).unwrap_or_default();
        let complete: Vec<String> = text
            .split_inclusive('\n')
            .filter(|l| l.ends_with('\n'))
            .map(str::to_owned)
            .collect();
        if complete.len() >= expected.len() || Instant::now() > deadline {
            break complete;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let _ = relay.kill();
    let _ = relay.wait();
    let expected: Vec<(uuid::Uuid, String, usize)> = expected
        .into_iter()
        .map(|(id, payload, headers)| (id, payload, headers as usize))
        .collect();
    common::assert_lines_as_stored(lines.iter().map(String::as_str), &expected, "event");
}

/// A webhook receiver down for 10 s under a WAL-mode relay: the stream is
/// held (nothing set aside, no attempt counted, nothing dead-lettered),
/// `/metrics` shows the slot's lag growing while a relay reads it, and
/// everything arrives once the receiver is back, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ten_second_broker_outage_holds_the_stream_and_shows_the_slots_lag() {
    const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    let receiver = outbox_testkit::webhook::Receiver::start(SECRET).await;
    receiver.stop();
    let cluster = tokio::task::spawn_blocking(|| logical_cluster(&[]))
        .await
        .unwrap();
    let url = cluster.url();
    let out = migrate_wal(&url);
    assert!(out.status.success(), "{}", common::text(&out.stderr));
    let pool = sqlx::PgPool::connect(&url).await.unwrap();
    let http_port = outbox_testkit::process::free_port();
    let mut relay = common::bin()
        .env("DATABASE_URL", &url)
        .env("OUTBOX_PUBLISHER_HTTP_SECRET", SECRET)
        .env("OUTBOX_HTTP_REFRESH_MS", "200")
        .args(["relay", "--publisher", &receiver.url("/hook")])
        .args(["--http-addr", &format!("127.0.0.1:{http_port}")])
        .args(["--instance-id", "outage"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut expected = Vec::new();
    for n in 0..10 {
        expected.extend(emit_round(&pool, 20, n).await.unwrap());
    }
    let metric = |text: &str, name: &str| -> f64 {
        text.lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(f64::NAN)
    };
    let outage_ends = Instant::now() + Duration::from_secs(10);
    let mut lag_seen = 0.0f64;
    while Instant::now() < outage_ends {
        if let Some((200, text)) = common::http_get(http_port, "/metrics").await {
            if metric(&text, "outbox_slot_active") == 1.0 {
                lag_seen = lag_seen.max(metric(&text, "outbox_slot_lag_bytes"));
            }
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert!(
        lag_seen > 0.0,
        "the slot's lag shows in /metrics during the outage"
    );
    let (rows, dead): (i64, i64) = sqlx::query_as(
        "SELECT (SELECT count(*) FROM outbox_events), (SELECT count(*) FROM outbox_dead_letters)",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(
        (rows, dead),
        (0, 0),
        "nothing set aside, no attempt, no dead letter"
    );
    receiver.start_again().await;
    let deadline = Instant::now() + Duration::from_secs(60);
    while receiver.deliveries().len() < expected.len() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let _ = relay.kill();
    let _ = relay.wait();
    let deliveries = receiver.deliveries();
    let got: Vec<(uuid::Uuid, String, i64)> = deliveries
        .iter()
        .map(|d| {
            let body: serde_json::Value = serde_json::from_slice(&d.body).unwrap();
            (
                d.event_id().unwrap(),
                d.headers["outbox-aggregate-id"].clone(),
                body["n"].as_i64().unwrap(),
            )
        })
        .collect();
    let view: Vec<(uuid::Uuid, &str, i64)> =
        got.iter().map(|(i, a, n)| (*i, a.as_str(), *n)).collect();
    outbox_testkit::assert_delivered_once_in_order("after the outage: ", &expected, &view);
}

/// An event larger than the broker accepts (Redis, `max_message_bytes`) is
/// dead-lettered with the reason, and never stops the stream: every other
/// event reaches the Redis stream, each aggregate's in order, including
/// the later events of the oversized one's aggregate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_larger_than_the_broker_accepts_is_dead_lettered_and_the_stream_goes_on() {
    use outbox_testkit::brokers::redis::{self, Redis};
    let Some(server) = Redis::start_or_skip_blocking().await else {
        return;
    };
    let cluster = tokio::task::spawn_blocking(|| logical_cluster(&[]))
        .await
        .unwrap();
    let url = cluster.url();
    let out = migrate_wal(&url);
    assert!(out.status.success(), "{}", common::text(&out.stderr));
    let pool = PgPool::connect(&url).await.unwrap();
    // a-1, a-2 (8 kB: over the limit), a-3, then b-1..b-3, each committed
    // on its own.
    let mut ids = Vec::new();
    for (aggregate, n, pad) in [
        ("a", 1, 10),
        ("a", 2, 8_000),
        ("a", 3, 10),
        ("b", 1, 10),
        ("b", 2, 10),
        ("b", 3, 10),
    ] {
        let id: uuid::Uuid = sqlx::query_scalar(
            "SELECT outbox_emit('order', $1, 'order.updated', jsonb_build_object('n', $2::int, 'pad', repeat('x', $3)))",
        )
        .bind(aggregate)
        .bind(n)
        .bind(pad)
        .fetch_one(&pool)
        .await
        .unwrap();
        ids.push((aggregate, n, id));
    }
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("outbox.toml");
    std::fs::write(
        &config,
        "[publisher.redis]\nstream = \"events\"\nmax_message_bytes = 4096\n",
    )
    .unwrap();
    let mut relay = common::bin()
        .env("DATABASE_URL", &url)
        .arg("--config")
        .arg(&config)
        .args(["relay", "--publisher", &server.url()])
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();

    let mut conn = redis::client::connect(&server.url()).await;
    let deadline = Instant::now() + Duration::from_secs(60);
    let got = loop {
        let got: Vec<(String, String)> = redis::client::read_stream(&mut conn, "events")
            .await
            .into_iter()
            .map(|e| (e.text("aggregate_id").unwrap(), e.text("id").unwrap()))
            .collect();
        if got.len() >= 5 || Instant::now() > deadline {
            break got;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    let reason = loop {
        let reason: Option<String> = sqlx::query_scalar(
            "SELECT last_error FROM outbox_events WHERE id = $1 AND dead_lettered_at IS NOT NULL",
        )
        .bind(ids[1].2)
        .fetch_optional(&pool)
        .await
        .unwrap();
        if reason.is_some() || Instant::now() > deadline {
            break reason;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let _ = relay.kill();
    let _ = relay.wait();
    let reason = reason.expect("the oversized event is dead-lettered");
    assert!(reason.contains("max_message_bytes"), "{reason}");
    let want: Vec<(String, String)> = ids
        .iter()
        .filter(|(a, n, _)| !(*a == "a" && *n == 2))
        .map(|(a, _, id)| (a.to_string(), id.to_string()))
        .collect();
    for aggregate in ["a", "b"] {
        let of = |v: &[(String, String)]| -> Vec<String> {
            v.iter()
                .filter(|(a, _)| a == aggregate)
                .map(|(_, id)| id.clone())
                .collect()
        };
        assert_eq!(
            of(&got),
            of(&want),
            "aggregate {aggregate}'s events, in order"
        );
    }
    let dead: i64 = sqlx::query_scalar("SELECT count(*) FROM outbox_dead_letters")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(dead, 1);
}

/// A transaction larger than a batch is confirmed only at its commit
/// (docs/operations.md, "The WAL mode"): `outbox relay` SIGKILLed in the
/// middle of publishing one 100,000-event transaction, then started
/// again, delivers every event, first deliveries in order per aggregate,
/// and repeats at most what it had published of that transaction before
/// the kill — the README's bound for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kill_inside_a_100000_event_transaction_repeats_at_most_what_was_published_of_it() {
    const EVENTS: i64 = 100_000;
    let cluster = tokio::task::spawn_blocking(|| logical_cluster(&[]))
        .await
        .unwrap();
    let url = cluster.url();
    let out = migrate_wal(&url);
    assert!(out.status.success(), "{}", common::text(&out.stderr));
    let pool = PgPool::connect(&url).await.unwrap();
    // One statement, one transaction: event n of aggregate agg-(g % 100).
    let expected: Vec<uuid::Uuid> = sqlx::query_scalar(
        "SELECT outbox_emit('order', 'agg-' || (g % 100), 'order.updated', jsonb_build_object('n', g / 100))
         FROM generate_series(0, $1 - 1) AS g",
    )
    .bind(EVENTS)
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(expected.len() as i64, EVENTS);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("events.jsonl");
    let lines = |file: &Path| {
        std::fs::read(file)
            .map(|b| b.iter().filter(|c| **c == b'\n').count())
            .unwrap_or(0)
    };
    let mut relay = spawn(&url, &file, "big-1");
    let deadline = Instant::now() + Duration::from_secs(120);
    while lines(&file) < 20_000 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    relay.kill().unwrap(); // SIGKILL
    relay.wait().unwrap();
    let before_kill = common::read_deliveries(&file).len();
    assert!(
        (1..EVENTS as usize).contains(&before_kill),
        "killed with some but not all of the transaction published: {before_kill}"
    );
    let mut relay = spawn(&url, &file, "big-2");
    let deadline = Instant::now() + Duration::from_secs(180);
    loop {
        let got = common::read_deliveries(&file);
        let ids: std::collections::HashSet<&str> = got.iter().map(|(i, _, _)| i.as_str()).collect();
        if ids.len() >= expected.len() || Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let _ = relay.kill();
    let _ = relay.wait();
    let (delivered, dups) = common::check_deliveries(&file, &expected);
    eprintln!(
        "{EVENTS} events in one transaction: {before_kill} published before the kill, {delivered} lines, {dups} duplicates"
    );
    assert!(
        dups <= before_kill,
        "{dups} duplicates: more than the {before_kill} published before the kill"
    );
    assert!(dups as i64 <= EVENTS, "at most the transaction's size");
}
