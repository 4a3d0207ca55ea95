//! The publisher conformance suite for [`NatsPublisher`], against a real
//! `nats-server -js` started by the test kit (`apt-get install nats-server`;
//! `OUTBOX_SKIP_BROKER_TESTS=nats` skips these tests instead).
//!
//! One server is shared by the cases that leave it running; the cases that
//! stop, freeze or lock it get a server of their own.
//!
//! Longer than most files: besides the shared suite it holds the
//! NATS-only cases (de-duplication, missing stream, max_payload, frozen
//! server, credentials).
#![cfg(feature = "nats")]

#[macro_use]
mod common;

use std::collections::HashSet;
use std::time::Duration;

use outbox::{Outcome, Publisher};
use outbox_publishers::nats::{NatsConfig, NatsPublisher, NoStream};
use outbox_testkit::brokers;
use outbox_testkit::brokers::nats::client::{self, StoredMessage};
use outbox_testkit::brokers::nats::{Nats, NatsServer, MAX_PAYLOAD_BYTES};
use outbox_testkit::conformance::{self, Harness, Received, Scope, EVENT_ID_HEADER};

broker_harness! {
    /// The suite's view of [`NatsPublisher`] and its JetStream server.
    struct NatsHarness { nats: NatsServer }
    publishes NatsPublisher as "nats (jetstream)", common::restartable(MAX_PAYLOAD_BYTES + 100_000);
    faithful_up_to: Some(MAX_PAYLOAD_BYTES - 4_000);

    fn default_destination(&self, scope: &Scope) -> String {
        format!("outbox.{}.{}", scope.aggregate_type(), scope.event_type())
    }

    async fn prepare(&self, scope: &Scope) {
        let js = client::context(&self.nats.url()).await;
        client::create_stream(&js, scope.name(), &stream_subjects(scope)).await;
    }

    async fn consume(&self, scope: &Scope, expected: usize, deadline: Duration) -> Vec<Received> {
        let js = client::context(&self.nats.url()).await;
        let mut ids = HashSet::new();
        if expected == 0 {
            return Vec::new();
        }
        client::read_stream(&js, scope.name(), deadline, |m| {
            if let Some(id) = m.headers.get(EVENT_ID_HEADER) {
                ids.insert(id.clone());
            }
            ids.len() >= expected
        })
        .await
        .into_iter()
        .map(received)
        .collect()
    }
}

impl NatsHarness {
    fn config(&self) -> NatsConfig {
        NatsConfig {
            ack_timeout_ms: 5_000,
            connect_timeout_ms: 2_000,
            ..NatsConfig::from_url(&self.nats.url()).expect("test server url")
        }
    }
}

/// The stream a scope's messages are kept in: its default subjects and its
/// override.
fn stream_subjects(scope: &Scope) -> Vec<String> {
    vec![
        format!("outbox.{}.>", scope.name()),
        format!("{}.>", scope.name()),
    ]
}

fn received(m: StoredMessage) -> Received {
    Received {
        destination: m.subject,
        key: None,
        headers: m.headers,
        payload: m.payload,
    }
}

// ---- NATS specifics ----

/// `Nats-Msg-Id` carries the event id, so JetStream stores an event
/// published twice (a relay's repeat after a lost PubAck) once; both
/// publishes are delivered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repeated_event_is_stored_once() {
    let Some(h) = NatsHarness::shared().await else {
        return;
    };
    let scope = Scope::new("dedup");
    h.prepare(&scope).await;
    let p = h.publisher().await;
    let event = conformance::event(&scope, "a", 0);
    for _ in 0..3 {
        conformance::deliver(&p, &event).await;
    }
    let later = conformance::event(&scope, "a", 1);
    conformance::deliver(&p, &later).await;
    let js = client::context(&h.nats.url()).await;
    let stored = client::read_stream(&js, scope.name(), Duration::from_secs(3), |_| false).await;
    assert_eq!(stored.len(), 2, "one message per event: {stored:?}");
    assert_eq!(
        stored[0].headers.get("Nats-Msg-Id"),
        Some(&event.id.to_string())
    );
    assert_eq!(
        stored[1].headers.get("Nats-Msg-Id"),
        Some(&later.id.to_string())
    );
    p.close().await;
}

/// A subject no stream captures is retried by default (an operator may be
/// creating the stream) and rejected with `no_stream = reject`; the other
/// events of the call are delivered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_stream_follows_the_setting() {
    let Some(h) = NatsHarness::shared().await else {
        return;
    };
    let scope = Scope::new("nostream");
    h.prepare(&scope).await;
    let mut lost = conformance::event(&scope, "lost", 0);
    lost.topic = Some(format!("nowhere.{}", scope.name()));
    for (setting, rejected) in [(NoStream::Retry, false), (NoStream::Reject, true)] {
        let p = NatsPublisher::new(NatsConfig {
            no_stream: setting,
            ..h.config()
        })
        .unwrap();
        let ok = conformance::event(&scope, &format!("ok-{rejected}"), 0);
        let outcomes = p.publish(&[lost.clone(), ok]).await.unwrap();
        match (&outcomes[0], rejected) {
            (Outcome::Retry(why), false) | (Outcome::Rejected(why), true) => {
                assert!(
                    why.contains("no JetStream stream") && why.contains("nowhere."),
                    "{why}"
                );
            }
            other => panic!("no_stream = {setting:?}: {other:?}"),
        }
        assert_eq!(outcomes[1], Outcome::Delivered);
        p.close().await;
    }
}

/// A message above the server's `max_payload` is rejected before it is
/// sent (the server would close the connection on it); the rest of the
/// call is delivered on the same connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversized_message_is_refused_alone() {
    let Some(h) = NatsHarness::shared().await else {
        return;
    };
    let scope = Scope::new("big");
    h.prepare(&scope).await;
    let p = h.publisher().await;
    // Connect first, so the server's own max_payload is known.
    p.health().await.unwrap();
    let mut big = conformance::event(&scope, "big", 0);
    big.payload = format!("\"{}\"", "x".repeat(MAX_PAYLOAD_BYTES));
    let small = conformance::event(&scope, "small", 0);
    let outcomes = p.publish(&[big, small.clone()]).await.unwrap();
    let Outcome::Rejected(why) = &outcomes[0] else {
        panic!("{outcomes:?}");
    };
    assert!(why.contains("max_payload (1048576 bytes)"), "{why}");
    assert_eq!(outcomes[1], Outcome::Delivered);
    let again = conformance::event(&scope, "small", 1);
    conformance::deliver(&p, &again).await;
    let got = h.consume(&scope, 2, Duration::from_secs(10)).await;
    let ids: Vec<_> = got.iter().filter_map(Received::event_id).collect();
    assert_eq!(ids, vec![small.id, again.id]);
}

/// A hung server (frozen with SIGSTOP) keeps the connection open but sends
/// no PubAck: the publish is an outage after `ack_timeout_ms`, not a
/// retry, and delivery resumes after the thaw.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_server_is_an_outage_not_a_hang() {
    let Some(h) = NatsHarness::private().await else {
        return;
    };
    let scope = Scope::new("frozen");
    h.prepare(&scope).await;
    let p = NatsPublisher::new(NatsConfig {
        ack_timeout_ms: 1_500,
        ..h.config()
    })
    .unwrap();
    let warm = conformance::event(&scope, "warm", 0);
    conformance::deliver(&p, &warm).await;
    let batch: Vec<_> = (0..50)
        .map(|n| conformance::event(&scope, &format!("f{n}"), 0))
        .collect();
    let (frozen, took) = common::publish_while_frozen(
        &h.nats,
        &p,
        &batch,
        "a publish to a frozen server must return",
    )
    .await;
    let e = frozen.expect_err("nothing can be acknowledged by a frozen server");
    assert!(e.message.contains("timed out"), "{e}");
    eprintln!("publish to the frozen server returned after {took:.2?}: {e}");
    conformance::deliver_after_thaw(&p, &batch).await;
    let got = h.consume(&scope, 51, Duration::from_secs(10)).await;
    assert_eq!(
        conformance::distinct_events(&got),
        51,
        "every event once in the stream after the repeats"
    );
}

/// Credentials: a wrong password is an outage naming the server (never
/// the password), the right one delivers, and a server that wants a login
/// refuses a publisher without one the same way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn credentials_are_used_and_never_shown() {
    let start = || Nats::start_with_user("relay", "s3cret-pw");
    let Some(nats) = brokers::start_blocking_or_skip(brokers::nats::NAME, start).await else {
        return;
    };
    let url = nats.url();
    let port = nats.port();
    let scope = Scope::new("auth");
    let event = conformance::event(&scope, "a", 0);
    for (user, password) in [(Some("relay"), Some("wrong-pw")), (None, None)] {
        let p = NatsPublisher::new(NatsConfig {
            user: user.map(str::to_owned),
            password: password.map(str::to_owned),
            connect_timeout_ms: 2_000,
            ..NatsConfig::from_url(&url).unwrap()
        })
        .unwrap();
        let e = common::assert_refused_login(&p, &event, port, "wrong-pw").await;
        assert!(e.message.to_lowercase().contains("authorization"), "{e}");
    }
    let authed = NatsConfig::from_url(&format!("nats://relay:s3cret-pw@127.0.0.1:{port}")).unwrap();
    let js = {
        let client =
            async_nats::ConnectOptions::with_user_and_password("relay".into(), "s3cret-pw".into())
                .connect(&url)
                .await
                .unwrap();
        async_nats::jetstream::new(client)
    };
    client::create_stream(&js, scope.name(), &stream_subjects(&scope)).await;
    let p = NatsPublisher::new(authed).unwrap();
    conformance::deliver(&p, &event).await;
    assert!(!format!("{p:?}").contains("s3cret"));
    p.close().await;
}
