//! The `outbox` program publishing to NATS JetStream and Redis Streams, end
//! to end: events written by plain SQL, `outbox relay --drain --publisher
//! nats://…|redis://…` run as a child process, every message read back
//! with the broker's own client (a JetStream consumer, `XRANGE`); and what
//! bad NATS and Redis settings do to `config check`, `relay` and `/readyz`.
//!
//! The servers are started by the test kit (`apt-get install nats-server
//! redis-server`); `OUTBOX_SKIP_BROKER_TESTS` naming `nats` or `redis` (or
//! `all`) skips the matching tests.
//!
//! Longer than most files: two brokers, each end to end, with the bad
//! settings and the outages of both.

mod common;

use std::collections::HashMap;
use std::net::TcpListener;
use std::time::Duration;

use outbox_testkit::brokers::nats::{self, Nats};
use outbox_testkit::brokers::redis::{self, Redis};
use uuid::Uuid;

const AGGREGATES: i64 = 50;
const PER_AGGREGATE: i64 = 40;
/// How long reading every message back may take.
const CONSUME_DEADLINE: Duration = Duration::from_secs(60);
/// The NATS subject of the test events (the default template).
const SUBJECT: &str = "outbox.order.order.updated";
/// The Redis stream of the test events (the default template).
const STREAM: &str = "outbox:order";

/// One message read back: event id, aggregate, destination, body.
struct Got {
    id: Option<String>,
    aggregate: Option<String>,
    destination: String,
    payload: Vec<u8>,
}

/// Every expected event arrived once at least, with its aggregate, at
/// `destination`, nothing else arrived, and first deliveries kept
/// per-aggregate order; returns the number of duplicates.
fn check(
    broker: &str,
    expected: &HashMap<Uuid, (String, i64)>,
    got: &[Got],
    destination: &str,
) -> usize {
    let mut deliveries = Vec::with_capacity(got.len());
    for (i, g) in got.iter().enumerate() {
        let id: Uuid =
            g.id.as_deref()
                .and_then(|id| id.parse().ok())
                .unwrap_or_else(|| panic!("{broker}: message {i} has no event id"));
        let Some((aggregate, n)) = expected.get(&id) else {
            panic!("{broker}: message {i} is event {id}, which was never written");
        };
        assert_eq!(g.aggregate.as_ref(), Some(aggregate), "{broker}: {id}");
        assert_eq!(g.destination, destination, "{broker}: {id}");
        let body: serde_json::Value = serde_json::from_slice(&g.payload)
            .unwrap_or_else(|e| panic!("{broker}: {id}: body is not JSON ({e})"));
        assert_eq!(body["n"].as_i64(), Some(*n), "{broker}: {id}: body {body}");
        deliveries.push((id, aggregate.as_str(), *n));
    }
    outbox_testkit::assert_delivered_once_in_order(
        &format!("{broker}: "),
        expected.keys(),
        &deliveries,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relay_program_delivers_to_nats_end_to_end() {
    let Some(server) = Nats::start_or_skip_blocking().await else {
        return;
    };
    let js = nats::client::context(&server.url()).await;
    nats::client::create_stream(&js, "OUTBOX", &["outbox.>".to_owned()]).await;
    let (db, pool) = outbox_testkit::postgres::migrated_test_db().await;
    let expected = common::insert_backlog(&pool, AGGREGATES, PER_AGGREGATE).await;
    let took = common::drain_with(&db.url, &pool, &server.url(), "nats-redis-e2e").await;

    let mut ids = std::collections::HashSet::new();
    let stored = nats::client::read_stream(&js, "OUTBOX", CONSUME_DEADLINE, |m| {
        if let Some(id) = m.headers.get("outbox-event-id") {
            ids.insert(id.clone());
        }
        ids.len() >= expected.len()
    })
    .await;
    let got: Vec<Got> = stored
        .into_iter()
        .map(|m| {
            assert_eq!(
                m.headers.get("Nats-Msg-Id"),
                m.headers.get("outbox-event-id"),
                "Nats-Msg-Id is the event id"
            );
            assert!(m.headers.contains_key("traceparent"), "{:?}", m.headers);
            Got {
                id: m.headers.get("outbox-event-id").cloned(),
                aggregate: m.headers.get("outbox-aggregate-id").cloned(),
                destination: m.subject,
                payload: m.payload,
            }
        })
        .collect();
    let dups = check("nats", &expected, &got, SUBJECT);
    eprintln!(
        "nats: {} events written, {} messages read back, {dups} duplicates (relay drained in {took:.2?})",
        expected.len(),
        got.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relay_program_delivers_to_redis_end_to_end() {
    let Some(server) = Redis::start_or_skip_blocking().await else {
        return;
    };
    let (db, pool) = outbox_testkit::postgres::migrated_test_db().await;
    let expected = common::insert_backlog(&pool, AGGREGATES, PER_AGGREGATE).await;
    let took = common::drain_with(&db.url, &pool, &server.url(), "nats-redis-e2e").await;

    let mut conn = redis::client::connect(&server.url()).await;
    let got: Vec<Got> = redis::client::read_stream(&mut conn, STREAM)
        .await
        .into_iter()
        .map(|e| {
            assert!(
                e.text("headers").is_some_and(|h| h.contains("traceparent")),
                "{e:?}"
            );
            assert!(
                e.text("created_at")
                    .is_some_and(|c| chrono::DateTime::parse_from_rfc3339(&c).is_ok()),
                "{e:?}"
            );
            Got {
                id: e.text("id"),
                aggregate: e.text("aggregate_id"),
                destination: STREAM.to_owned(),
                payload: e.get("payload").unwrap_or_default().to_vec(),
            }
        })
        .collect();
    let dups = check("redis", &expected, &got, STREAM);
    eprintln!(
        "redis: {} events written, {} entries read back, {dups} duplicates (relay drained in {took:.2?})",
        expected.len(),
        got.len()
    );
}

/// Runs `outbox config check` or `relay` with `spec` and the config file
/// text `file`, if any.
fn run(command: &str, spec: &str, file: Option<&str>) -> std::process::Output {
    common::run_settings(command, spec, file, &[])
}

#[test]
fn bad_nats_and_redis_settings_are_one_clear_line_and_never_show_secrets() {
    let cases: &[(&str, Option<&str>, &[&str])] = &[
        ("nats://", None, &["servers", "HOST:PORT"]),
        ("nats://127.0.0.1:99999", None, &["servers", "65535"]),
        ("nats://u:hunter2@127.0.0.1:notaport", None, &["servers"]),
        (
            "nats://127.0.0.1:4222/x",
            None,
            &["url", "nats://HOST:PORT"],
        ),
        ("nats:/127.0.0.1:4222", None, &["unknown", "nats://"]),
        (
            "nats://127.0.0.1:4222",
            Some("[publisher.nats]\nsubjct = \"x\"\n"),
            &["subjct"],
        ),
        (
            "nats://127.0.0.1:4222",
            Some("[publisher.nats]\nsubject = \"outbox.*\"\n"),
            &["subject", "wildcards"],
        ),
        (
            "nats://127.0.0.1:4222",
            Some(
                "[publisher.nats]\nuser = \"relay\"\npassword = \"hunter2\"\ntoken = \"hunter2\"\n",
            ),
            &["one way to log in"],
        ),
        (
            "nats://127.0.0.1:4222",
            Some("[publisher.nats]\ncredentials_file = \"/nonexistent/relay.creds\"\n"),
            &["credentials_file", "cannot be read"],
        ),
        ("redis://", None, &["url", "no host"]),
        ("redis://u:hunter2@127.0.0.1:99999", None, &["url", "port"]),
        ("redis://127.0.0.1:6379/x", None, &["url", "database"]),
        ("rediss://u:hunter2@127.0.0.1:6379", None, &["url", "TLS"]),
        ("redis:127.0.0.1", None, &["unknown", "redis://"]),
        (
            "redis://127.0.0.1:6379",
            Some("[publisher.redis]\nmax_len = 10\n"),
            &["max_len"],
        ),
        (
            "redis://127.0.0.1:6379",
            Some("[publisher.redis]\nwait_replicas = 1\nwait_timeout_ms = 0\n"),
            &["wait_timeout_ms = 0"],
        ),
    ];
    common::assert_bad_settings_fail_in_one_line(cases, "file", &["hunter2"], run);
    // Good ones pass, and config check shows no secret.
    for (spec, file) in [
        (
            "nats://relay:hunter2@127.0.0.1:4222,127.0.0.1:4223",
            "[publisher.nats]\nno_stream = \"reject\"\n",
        ),
        (
            "nats://127.0.0.1:4222",
            "[publisher.nats]\nuser = \"relay\"\npassword = \"hunter2\"\n",
        ),
        (
            "redis://relay:hunter2@127.0.0.1:6379/2",
            "[publisher.redis]\nmaxlen = 100000\n",
        ),
    ] {
        let stdout = common::assert_config_passes(spec, &run("config", spec, Some(file)));
        assert!(!stdout.contains("hunter2"), "{stdout}");
    }
    let out = common::run(&["relay", "--help"], None);
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(
        help.contains("nats://") && help.contains("redis://"),
        "{help}"
    );
}

/// A port of `127.0.0.1` that accepts connections and never says anything:
/// a hung host. Held open until the listener is dropped.
fn silent_listener() -> (TcpListener, u16) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let accepting = listener.try_clone().unwrap();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for stream in accepting.incoming().flatten() {
            held.push(stream);
        }
    });
    (listener, port)
}

/// Runs `outbox relay` on one pending event with `spec` (and config file
/// text `file`), until `/readyz` reports not ready with `expect` in its
/// body while the relay runs; checks that no attempt was counted and that neither `/readyz` nor
/// the relay's output shows `secret`. Returns the `/readyz` body.
async fn outage_on_readyz(spec: &str, file: Option<&str>, expect: &str, secret: &str) -> String {
    let (_db, pool, mut cmd, http_port) = common::one_event_relay(spec, "nats-redis-outage").await;
    let dir = tempfile::tempdir().unwrap();
    if let Some(text) = file {
        let path = dir.path().join("outbox.toml");
        std::fs::write(&path, text).unwrap();
        cmd.arg("--config").arg(&path);
    }
    // Running: it holds its partitions, so it has met the outage
    // publishing, not only in the health check.
    common::assert_outage_on_readyz(
        cmd,
        &pool,
        http_port,
        &format!("the outage of {spec}"),
        |body| body.contains(expect) && body.contains("\"state\":\"running\""),
        secret,
        Duration::from_millis(1_500),
    )
    .await
}

/// A port nothing listens on, a hung host and a wrong password are outages
/// of the running relay: `/readyz` names the server and the reason (for a
/// hung host, that its check got no answer), never the password, and no
/// attempt is counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_servers_and_wrong_passwords_are_outages_on_readyz() {
    // Port 1 of 127.0.0.1: nothing listens there (a port found free could
    // be taken by a server started later).
    let closed = "127.0.0.1:1:";
    let (_hung, hung) = silent_listener();
    let no_answer = "no answer within";
    let mut bodies = Vec::new();
    if !outbox_testkit::brokers::skipped(nats::NAME) {
        let server = tokio::task::spawn_blocking(|| {
            Nats::start_with_user("relay", "right-pw").unwrap_or_else(|e| panic!("{e}"))
        })
        .await
        .unwrap();
        let at = format!("127.0.0.1:{}:", server.port());
        let wrong = "[publisher.nats]\nuser = \"relay\"\npassword = \"hunter2-wrong\"\n";
        for (spec, file, expect) in [
            ("nats://127.0.0.1:1".to_owned(), None, closed),
            (format!("nats://127.0.0.1:{hung}"), None, no_answer),
            (server.url(), Some(wrong), at.as_str()),
            (server.url(), None, at.as_str()),
        ] {
            bodies.push(outage_on_readyz(&spec, file, expect, "hunter2").await);
        }
    }
    if !outbox_testkit::brokers::skipped(redis::NAME) {
        let server = tokio::task::spawn_blocking(|| {
            Redis::start_with_password("right-pw").unwrap_or_else(|e| panic!("{e}"))
        })
        .await
        .unwrap();
        let port = server.port();
        let at = format!("127.0.0.1:{port}:");
        for (spec, expect) in [
            ("redis://127.0.0.1:1".to_owned(), closed),
            (format!("redis://127.0.0.1:{hung}"), no_answer),
            (
                format!("redis://:hunter2-wrong@127.0.0.1:{port}"),
                at.as_str(),
            ),
            (format!("redis://127.0.0.1:{port}"), at.as_str()),
        ] {
            bodies.push(outage_on_readyz(&spec, None, expect, "hunter2").await);
        }
    }
    for body in bodies {
        eprintln!("/readyz: {}", body.trim());
    }
}
