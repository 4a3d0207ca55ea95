//! The publisher conformance suite for [`RedisPublisher`], against a real
//! `redis-server` started by the test kit (`apt-get install redis-server`;
//! `OUTBOX_SKIP_BROKER_TESTS=redis` skips these tests instead). The server
//! runs with `appendonly yes` and `appendfsync always`, so the restart case
//! checks what Redis promises under that setting.
//!
//! Redis has no size limit worth testing (512 MiB per value), so the
//! oversized case runs against the publisher's own `max_message_bytes`,
//! set to 1 MiB here.
//!
//! One server is shared by the cases that leave it running; the cases that
//! stop, freeze or reconfigure it get a server of their own.
//!
//! Longer than most files: besides the shared suite it holds the
//! Redis-only cases (fields, WRONGTYPE, MAXLEN, WAIT, OOM, frozen server,
//! credentials).
#![cfg(feature = "redis")]

#[macro_use]
mod common;

use std::collections::{BTreeMap, HashSet};
use std::time::{Duration, Instant};

use outbox::{Outcome, Publisher};
use outbox_publishers::redis::{RedisConfig, RedisPublisher};
use outbox_testkit::brokers;
use outbox_testkit::brokers::redis::client::{self, Entry};
use outbox_testkit::brokers::redis::{Redis, RedisServer};
use outbox_testkit::conformance::{self, Harness, Received, Scope};

/// The publisher's entry-size limit in these tests.
const MAX_MESSAGE_BYTES: usize = 1024 * 1024;

/// The streams a scope's events go to: the default one and the override.
fn streams(scope: &Scope) -> [String; 2] {
    [
        format!("outbox:{}", scope.aggregate_type()),
        scope.override_destination(),
    ]
}

/// An entry as the suite sees a message: the identity fields as the
/// `outbox-*` headers, the `headers` field's members as headers, the
/// `payload` field as the body.
fn received(stream: &str, entry: &Entry) -> Received {
    let mut headers = BTreeMap::new();
    for (field, header) in [
        ("id", "outbox-event-id"),
        ("event_type", "outbox-event-type"),
        ("aggregate_type", "outbox-aggregate-type"),
        ("aggregate_id", "outbox-aggregate-id"),
    ] {
        if let Some(v) = entry.text(field) {
            headers.insert(header.to_owned(), v);
        }
    }
    let own: BTreeMap<String, String> = entry
        .get("headers")
        .map(|h| serde_json::from_slice(h).expect("the headers field is a JSON object of strings"))
        .unwrap_or_default();
    headers.extend(own);
    Received {
        destination: stream.to_owned(),
        key: None,
        headers,
        payload: entry.get("payload").unwrap_or_default().to_vec(),
    }
}

broker_harness! {
    /// The suite's view of [`RedisPublisher`] and its server.
    struct RedisHarness { redis: RedisServer }
    // The publisher's max_message_bytes, not the server's.
    publishes RedisPublisher as "redis (streams)", common::restartable(MAX_MESSAGE_BYTES + 100_000);
    faithful_up_to: Some(MAX_MESSAGE_BYTES - 1_000);

    fn default_destination(&self, scope: &Scope) -> String {
        format!("outbox:{}", scope.aggregate_type())
    }

    async fn consume(&self, scope: &Scope, expected: usize, deadline: Duration) -> Vec<Received> {
        let end = Instant::now() + deadline;
        let mut conn = client::connect(&self.redis.url()).await;
        loop {
            let mut out = Vec::new();
            for stream in streams(scope) {
                for entry in client::read_stream(&mut conn, &stream).await {
                    out.push(received(&stream, &entry));
                }
            }
            if conformance::distinct_events(&out) >= expected || Instant::now() > end {
                return out;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl RedisHarness {
    fn config(&self) -> RedisConfig {
        RedisConfig {
            url: self.redis.url(),
            max_message_bytes: MAX_MESSAGE_BYTES,
            response_timeout_ms: 5_000,
            connect_timeout_ms: 1_000,
            ..RedisConfig::default()
        }
    }
}

// ---- Redis specifics ----

/// Every field, in order, with the payload byte for byte and `created_at`
/// in RFC 3339.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn entry_fields() {
    let Some(h) = RedisHarness::shared().await else {
        return;
    };
    let scope = Scope::new("fields");
    let mut event = conformance::event(&scope, "order-1", 0);
    event.payload = r#"{"n": 1e400, "s": "é"}"#.into();
    event
        .headers
        .insert("traceparent".into(), "00-ab-01".into());
    let p = h.publisher().await;
    conformance::deliver(&p, &event).await;
    let mut conn = client::connect(&h.redis.url()).await;
    let entries = client::read_stream(&mut conn, &h.default_destination(&scope)).await;
    assert_eq!(entries.len(), 1);
    let e = &entries[0];
    let names: Vec<_> = e.fields.iter().map(|(k, _)| k.as_str()).collect();
    let in_order = "id aggregate_type aggregate_id event_type payload headers created_at";
    assert_eq!(names, in_order.split(' ').collect::<Vec<_>>());
    assert_eq!(e.text("id"), Some(event.id.to_string()));
    assert_eq!(e.text("aggregate_type"), Some(event.aggregate_type.clone()));
    assert_eq!(e.text("aggregate_id"), Some("order-1".into()));
    assert_eq!(e.text("event_type"), Some(event.event_type.clone()));
    assert_eq!(e.get("payload"), Some(event.payload.as_bytes()));
    assert_eq!(
        e.text("headers"),
        Some(r#"{"traceparent":"00-ab-01"}"#.into())
    );
    let created = e.text("created_at").unwrap();
    let parsed = chrono::DateTime::parse_from_rfc3339(&created).unwrap();
    assert!(
        (parsed.timestamp_micros() - event.created_at.timestamp_micros()).abs() <= 1,
        "{created}"
    );
}

/// A stream key that holds another type is the one event's problem: it is
/// rejected (WRONGTYPE), the rest of the wave is delivered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_of_another_type_rejects_only_its_event() {
    let Some(h) = RedisHarness::shared().await else {
        return;
    };
    let scope = Scope::new("wrongtype");
    let mut conn = client::connect(&h.redis.url()).await;
    let taken = format!("{}.string", scope.name());
    let _: () = redis::cmd("SET")
        .arg(&taken)
        .arg("not a stream")
        .query_async(&mut conn)
        .await
        .unwrap();
    let mut bad = conformance::event(&scope, "bad", 0);
    bad.topic = Some(taken.clone());
    let good = conformance::event(&scope, "good", 0);
    let p = h.publisher().await;
    let outcomes = p.publish(&[bad, good]).await.unwrap();
    let Outcome::Rejected(why) = &outcomes[0] else {
        panic!("{outcomes:?}");
    };
    assert!(why.contains("WRONGTYPE") && why.contains(&taken), "{why}");
    assert_eq!(outcomes[1], Outcome::Delivered);
}

/// `maxlen` trims streams approximately as they grow.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn maxlen_trims_the_stream() {
    let Some(h) = RedisHarness::shared().await else {
        return;
    };
    let scope = Scope::new("maxlen");
    let p = RedisPublisher::new(RedisConfig {
        maxlen: Some(10),
        ..h.config()
    })
    .unwrap();
    for n in 0..5 {
        let wave: Vec<_> = (0..100)
            .map(|a| conformance::event(&scope, &format!("a{a}"), n))
            .collect();
        let outcomes = p.publish(&wave).await.unwrap();
        assert!(outcomes.iter().all(|o| *o == Outcome::Delivered));
    }
    let mut conn = client::connect(&h.redis.url()).await;
    let len: usize = redis::cmd("XLEN")
        .arg(h.default_destination(&scope))
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(
        (10..500).contains(&len),
        "XLEN {len} after 500 entries with maxlen ~ 10"
    );
}

/// `wait_replicas` on a server without replicas: the entries are written
/// but not acknowledged by a replica, so the call is an outage (no attempt
/// counted), saying so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_replicas_are_an_outage() {
    let Some(h) = RedisHarness::shared().await else {
        return;
    };
    let scope = Scope::new("wait");
    let p = RedisPublisher::new(RedisConfig {
        wait_replicas: Some(1),
        wait_timeout_ms: 100,
        ..h.config()
    })
    .unwrap();
    let event = conformance::event(&scope, "a", 0);
    let e = conformance::expect_outage(&p, &event, "no replica can acknowledge").await;
    assert!(e.message.contains("WAIT counted 0 of 1 replicas"), "{e}");
}

/// Memory pressure (`OOM` under `maxmemory`) is retried, not an outage and
/// not a rejection; delivery resumes once memory is available.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn out_of_memory_is_retried() {
    let Some(h) = RedisHarness::private().await else {
        return;
    };
    let scope = Scope::new("oom");
    let mut conn = client::connect(&h.redis.url()).await;
    let set = |v: &'static str| {
        redis::cmd("CONFIG")
            .arg("SET")
            .arg("maxmemory")
            .arg(v)
            .clone()
    };
    let _: () = set("1").query_async(&mut conn).await.unwrap();
    let p = h.publisher().await;
    let event = conformance::event(&scope, "a", 0);
    let outcomes = p.publish(std::slice::from_ref(&event)).await.unwrap();
    let Outcome::Retry(why) = &outcomes[0] else {
        panic!("{outcomes:?}");
    };
    assert!(why.contains("OOM"), "{why}");
    let _: () = set("0").query_async(&mut conn).await.unwrap();
    conformance::deliver(&p, &event).await;
}

/// A hung server (frozen with SIGSTOP) answers nothing: the publish is an
/// outage after `response_timeout_ms`, and the next publish after the thaw
/// reconnects and delivers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_server_is_an_outage_not_a_hang() {
    let Some(h) = RedisHarness::private().await else {
        return;
    };
    let scope = Scope::new("frozen");
    let p = RedisPublisher::new(RedisConfig {
        response_timeout_ms: 1_000,
        ..h.config()
    })
    .unwrap();
    p.health().await.unwrap();
    let (frozen, took) = common::publish_while_frozen(
        &h.redis,
        &p,
        &[conformance::event(&scope, "a", 0)],
        "a publish to a frozen server must return",
    )
    .await;
    let e = frozen.expect_err("a frozen server is an outage");
    eprintln!("publish to the frozen server returned after {took:.2?}: {e}");
    let event = conformance::event(&scope, "b", 0);
    conformance::deliver_after_thaw(&p, std::slice::from_ref(&event)).await;
}

/// A wrong password is an outage naming the server (never the password);
/// the right one delivers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn credentials_are_used_and_never_shown() {
    let start = || Redis::start_with_password("s3cret-pw");
    let Some(redis) = brokers::start_blocking_or_skip(brokers::redis::NAME, start).await else {
        return;
    };
    let port = redis.port();
    let scope = Scope::new("auth");
    let event = conformance::event(&scope, "a", 0);
    for url in [
        format!("redis://:wrong-pw@127.0.0.1:{port}"),
        format!("redis://127.0.0.1:{port}"),
    ] {
        let p = RedisPublisher::from_url(&url).unwrap();
        common::assert_refused_login(&p, &event, port, "wrong-pw").await;
        assert!(p.health().await.is_err());
    }
    let p = RedisPublisher::from_url(&redis.url()).unwrap();
    conformance::deliver(&p, &event).await;
    let ids: HashSet<_> = {
        let mut conn = client::connect(&redis.url()).await;
        client::read_stream(&mut conn, &format!("outbox:{}", scope.aggregate_type()))
            .await
            .iter()
            .filter_map(|e| e.text("id"))
            .collect()
    };
    assert_eq!(ids, HashSet::from([event.id.to_string()]));
}
