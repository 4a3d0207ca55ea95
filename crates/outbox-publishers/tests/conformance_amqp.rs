//! The publisher conformance suite for [`AmqpPublisher`], against a real
//! RabbitMQ node started by the test kit (`apt-get install rabbitmq-server`;
//! `OUTBOX_SKIP_BROKER_TESTS=rabbitmq` skips these tests instead).
//!
//! One node is shared by the cases that leave it running; the cases that
//! stop it get a node of their own.
//!
//! Longer than most files: besides the shared suite it holds the
//! RabbitMQ-only cases (unroutable modes, frozen broker, channel renewal).
#![cfg(feature = "amqp")]

#[macro_use]
mod common;

use std::time::{Duration, Instant};

use lapin::options::BasicGetOptions;
use lapin::{Connection, ConnectionProperties};
use outbox::{Outcome, Publisher};
use outbox_publishers::amqp::{AmqpConfig, AmqpPublisher, ExchangeType, Unroutable};
use outbox_testkit::brokers::rabbitmq::{self, RabbitMqServer, MAX_MESSAGE_BYTES};
use outbox_testkit::conformance::{self, Collector, Harness, Received, Scope};

broker_harness! {
    /// The suite's view of [`AmqpPublisher`] and its RabbitMQ node.
    struct AmqpHarness { rabbit: RabbitMqServer }
    publishes AmqpPublisher as "amqp (rabbitmq)", common::restartable(MAX_MESSAGE_BYTES + 100_000);
    after_restart: AmqpHarness::bind_again;
    faithful_up_to: Some(MAX_MESSAGE_BYTES - 1_000);

    fn default_destination(&self, scope: &Scope) -> String {
        scope.event_type()
    }

    async fn prepare(&self, scope: &Scope) {
        let binding = (queue(scope), format!("{}.#", scope.name()));
        self.bind(std::slice::from_ref(&binding)).await;
        BOUND.lock().unwrap().push((self.rabbit.url(), binding));
    }

    async fn consume(&self, scope: &Scope, expected: usize, deadline: Duration) -> Vec<Received> {
        let end = Instant::now() + deadline;
        let conn = self.connect().await;
        let ch = conn.create_channel().await.expect("channel");
        let mut out = Collector::new();
        while out.distinct() < expected && Instant::now() < end {
            let got = ch
                .basic_get(queue(scope).into(), BasicGetOptions { no_ack: true })
                .await
                .expect("basic.get");
            let Some(m) = got else {
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            };
            let headers = rabbitmq::headers_as_text(&m.delivery.properties);
            out.push(Received {
                destination: m.delivery.routing_key.as_str().to_owned(),
                key: None,
                headers,
                payload: m.delivery.data.clone(),
            });
        }
        let _ = conn.close(200, "consumed".into()).await;
        out.into_messages()
    }
}

/// The `(queue, pattern)` bindings the cases prepared, by the URL of the
/// node they were made on, for [`AmqpHarness::bind_again`].
static BOUND: std::sync::Mutex<Vec<(String, (String, String))>> = std::sync::Mutex::new(Vec::new());

impl AmqpHarness {
    /// Declares each `(queue, pattern)` bound to the `outbox` exchange.
    async fn bind(&self, bindings: &[(String, String)]) {
        let conn = self.connect().await;
        let ch = conn.create_channel().await.expect("channel");
        for (queue, pattern) in bindings {
            rabbitmq::bind_queue(&ch, "outbox", queue, pattern).await;
        }
        let _ = conn.close(200, "prepared".into()).await;
    }

    /// After a restart, declares the prepared queues and bindings again,
    /// as their consumer would when it reconnects: a node killed within a
    /// second or so of a declaration can come back without it (its
    /// metadata log was not yet written), and every message would then
    /// come back unroutable and be retried until the case gives up.
    async fn bind_again(&self) {
        let url = self.rabbit.url();
        let bound: Vec<_> = BOUND
            .lock()
            .unwrap()
            .iter()
            .filter(|(on, _)| *on == url)
            .map(|(_, binding)| binding.clone())
            .collect();
        self.bind(&bound).await;
    }

    fn config(&self) -> AmqpConfig {
        AmqpConfig {
            url: self.rabbit.url(),
            confirm_timeout_ms: 10_000,
            connect_timeout_ms: 2_000,
            ..AmqpConfig::default()
        }
    }

    async fn connect(&self) -> Connection {
        Connection::connect(&self.rabbit.url(), ConnectionProperties::default())
            .await
            .expect("connecting to rabbitmq")
    }
}

fn queue(scope: &Scope) -> String {
    format!("q.{}", scope.name())
}

// ---- RabbitMQ specifics ----

/// A broker that hangs with its connections open (frozen with SIGSTOP)
/// takes no frames and sends no confirms: a publish must come back as an
/// outage within `confirm_timeout_ms`, not wait forever on a link that
/// looks alive, and the next publish after the thaw reconnects and
/// delivers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_broker_is_an_outage_not_a_hang() {
    let Some(h) = AmqpHarness::private().await else {
        return;
    };
    let scope = Scope::new("frozen");
    h.prepare(&scope).await;
    let p = AmqpPublisher::new(AmqpConfig {
        confirm_timeout_ms: 1_500,
        ..h.config()
    })
    .unwrap();
    let warm = conformance::event(&scope, "warm", 0);
    conformance::deliver(&p, &warm).await;

    // About 20 MB: more than the socket buffers of a frozen peer hold, so
    // sending itself stalls, not only the confirms.
    let pad = "x".repeat(64 * 1024);
    let batch: Vec<_> = (0..300)
        .map(|n| {
            let mut e = conformance::event(&scope, &format!("big-{n}"), n);
            e.payload = serde_json::json!({ "n": n, "pad": pad }).to_string();
            e
        })
        .collect();
    let (result, took) = common::publish_while_frozen(
        &h.rabbit,
        &p,
        &batch,
        "a publish to a frozen broker was still waiting after 20 s (confirm_timeout_ms 1500)",
    )
    .await;
    match result {
        Err(e) => assert!(e.message.contains("within 1500 ms"), "{e}"),
        Ok(outcomes) => assert!(
            outcomes
                .iter()
                .all(|o| matches!(o, Outcome::Unavailable(_))),
            "nothing can be confirmed by a frozen broker: {outcomes:?}"
        ),
    }
    eprintln!("publish to the frozen broker returned after {took:.2?}");

    let after = conformance::event(&scope, "after", 0);
    conformance::deliver_after_thaw(&p, std::slice::from_ref(&after)).await;
}

/// `message_id`, `type`, `content_type`, persistence and routing key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn message_properties() {
    let Some(h) = AmqpHarness::shared().await else {
        return;
    };
    let scope = Scope::new("props");
    h.prepare(&scope).await;
    let event = conformance::event(&scope, "order-1", 0);
    let p = h.publisher().await;
    conformance::deliver(&p, &event).await;
    let conn = h.connect().await;
    let ch = conn.create_channel().await.unwrap();
    let started = Instant::now();
    let m = loop {
        if let Some(m) = ch
            .basic_get(queue(&scope).into(), BasicGetOptions { no_ack: true })
            .await
            .unwrap()
        {
            break m;
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "the message never arrived"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let props = &m.delivery.properties;
    assert_eq!(
        props.message_id().as_ref().map(|s| s.as_str()),
        Some(event.id.to_string().as_str())
    );
    assert_eq!(
        props.kind().as_ref().map(|s| s.as_str()),
        Some(event.event_type.as_str())
    );
    assert_eq!(
        props.content_type().as_ref().map(|s| s.as_str()),
        Some("application/json")
    );
    assert_eq!(*props.delivery_mode(), Some(2), "persistent");
    assert_eq!(m.delivery.routing_key.as_str(), scope.event_type());
    assert_eq!(m.delivery.exchange.as_str(), "outbox");
    p.close().await;
}

/// An unroutable message (no queue bound) is retried by default, rejected
/// with `unroutable = reject`, and dropped (counted delivered) with
/// `unroutable = drop`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unroutable_messages_follow_the_setting() {
    let Some(h) = AmqpHarness::shared().await else {
        return;
    };
    let scope = Scope::new("unbound"); // never prepared: nothing is bound
    let event = conformance::event(&scope, "a", 0);
    for (setting, check) in [
        (Unroutable::Retry, "retry"),
        (Unroutable::Reject, "reject"),
        (Unroutable::Drop, "drop"),
    ] {
        let p = AmqpPublisher::new(AmqpConfig {
            unroutable: setting,
            ..h.config()
        })
        .unwrap();
        let outcome = p
            .publish(std::slice::from_ref(&event))
            .await
            .unwrap()
            .remove(0);
        match (setting, &outcome) {
            (Unroutable::Retry, Outcome::Retry(why))
            | (Unroutable::Reject, Outcome::Rejected(why)) => {
                assert!(
                    why.contains("unroutable") && why.contains(&scope.event_type()),
                    "{why}"
                );
            }
            (Unroutable::Drop, Outcome::Delivered) => {}
            _ => panic!("unroutable = {check}: unexpected outcome {outcome:?}"),
        }
        p.close().await;
    }
}

/// An exchange that exists with another type is a configuration error the
/// broker reports; it is an outage (no attempts burned), and says why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exchange_type_conflict_is_an_outage() {
    let Some(h) = AmqpHarness::shared().await else {
        return;
    };
    let scope = Scope::new("conflict");
    h.prepare(&scope).await; // declares `outbox` as a topic exchange
    let p = AmqpPublisher::new(AmqpConfig {
        exchange_type: ExchangeType::Fanout,
        ..h.config()
    })
    .unwrap();
    let event = conformance::event(&scope, "a", 0);
    let e = conformance::expect_outage(
        &p,
        &event,
        "a conflicting exchange declaration must be an outage",
    )
    .await;
    assert!(
        e.message.contains("declaring exchange") && e.message.contains("outbox"),
        "{e}"
    );
    assert!(!e.message.contains("guest:guest"), "{e}");
}

/// After the broker closed the channel on an oversized message, the same
/// publisher keeps working on a new channel — every time: the new channel
/// may get the id of the one whose close is still being settled, which
/// lapin then reports unusable; the publisher must get past that rather
/// than report an outage (it did in about 1 of 60 renewals).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn channel_is_renewed_after_a_rejection() {
    const ROUNDS: i64 = 300;
    let Some(h) = AmqpHarness::shared().await else {
        return;
    };
    let scope = Scope::new("renew");
    h.prepare(&scope).await;
    let p = h.publisher().await;
    let mut smalls = Vec::new();
    for n in 0..ROUNDS {
        let mut big = conformance::event(&scope, "big", n);
        big.payload = format!("{{\"blob\":\"{}\"}}", "x".repeat(MAX_MESSAGE_BYTES + 10));
        let small = conformance::event(&scope, "small", n);
        let outcomes = p
            .publish(&[big, small.clone()])
            .await
            .unwrap_or_else(|e| panic!("round {n}: {e}"));
        assert!(
            matches!(outcomes[0], Outcome::Rejected(_)),
            "round {n}: {outcomes:?}"
        );
        assert_eq!(outcomes[1], Outcome::Delivered, "round {n}");
        smalls.push(small.id);
    }
    let next = conformance::event(&scope, "next", 0);
    conformance::deliver(&p, &next).await;
    let expected = smalls.len() + 1;
    let got = h.consume(&scope, expected, Duration::from_secs(30)).await;
    let ids: Vec<_> = got.iter().filter_map(Received::event_id).collect();
    assert!(
        smalls.iter().all(|id| ids.contains(id)) && ids.contains(&next.id),
        "{} of {expected} messages read back",
        ids.len()
    );
    assert_eq!(
        ids.len(),
        expected,
        "the rejected messages must not be on the broker"
    );
}

/// An exchange deleted under a running publisher concerns every message: an
/// outage (not a rejection of whichever event came first), after which the
/// publisher reconnects and declares the exchange again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleted_exchange_is_an_outage_then_redeclared() {
    let Some(h) = AmqpHarness::shared().await else {
        return;
    };
    let scope = Scope::new("deleted");
    let exchange = format!("x.{}", scope.name());
    let p = AmqpPublisher::new(AmqpConfig {
        exchange: exchange.clone(),
        unroutable: Unroutable::Drop,
        ..h.config()
    })
    .unwrap();
    let first = conformance::event(&scope, "a", 0);
    conformance::deliver(&p, &first).await;
    let conn = h.connect().await;
    let ch = conn.create_channel().await.unwrap();
    ch.exchange_delete(
        exchange.as_str().into(),
        lapin::options::ExchangeDeleteOptions::default(),
    )
    .await
    .expect("deleting the exchange");
    let event = conformance::event(&scope, "a", 1);
    let e = conformance::expect_outage(
        &p,
        &event,
        "publishing to a deleted exchange must be an outage",
    )
    .await;
    assert!(e.message.contains("NOT_FOUND"), "{e}");
    assert_eq!(
        p.publish(&[conformance::event(&scope, "a", 2)])
            .await
            .unwrap(),
        vec![Outcome::Delivered],
        "the next publish reconnects and declares the exchange again"
    );
    let _ = conn.close(200, "done".into()).await;
}
