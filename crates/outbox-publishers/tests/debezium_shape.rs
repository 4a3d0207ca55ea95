//! The message a team migrating from Debezium's outbox event router
//! expects, read the way their consumers read it: subscribed (a consumer
//! group, not a partition assignment) to `outbox.event.<aggregate_type>`,
//! the key as the aggregate id, the last `id` header as the event id, the
//! value as the payload column's text.
//!
//! Events are written by plain SQL, as a service does, and delivered by a
//! relay with `event_id_header = "id"` and the default topic template.
//! Against librdkafka's mock cluster on every run, and against tansu, a
//! real Kafka-protocol broker (`OUTBOX_TANSU_BIN`, as in
//! `conformance_kafka.rs`).
#![cfg(feature = "kafka")]

use std::time::{Duration, Instant};

use outbox::Relay;
use outbox_publishers::kafka::{KafkaConfig, KafkaPublisher};
use outbox_testkit::brokers::kafka::Tansu;
use outbox_testkit::conformance::relay_config;
use outbox_testkit::postgres::migrated_test_db;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Headers, Message};
use rdkafka::mocking::MockCluster;
use sqlx::PgPool;
use uuid::Uuid;

/// One event as the table holds it, read before the relay deletes it.
#[derive(Debug, Clone, PartialEq)]
struct Stored {
    id: Uuid,
    aggregate_id: String,
    payload: String,
}

/// A message as a Debezium-router consumer sees it.
#[derive(Debug)]
struct Consumed {
    topic: String,
    key: Option<String>,
    /// Every `id` header, in order (the router writes exactly one).
    ids: Vec<String>,
    traceparent: Option<String>,
    value: Vec<u8>,
}

const TRACEPARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

/// Writes three events of two orders by plain SQL, one with a producer
/// header named `id` (which must not reach the message), and returns them
/// as stored, in insertion order (`seq`).
async fn write_orders(pool: &PgPool, aggregate_type: &str) -> Vec<Stored> {
    let rows = [
        (
            "o-1",
            "order.created",
            r#"{"total": 12345678901234567890, "customer": "Zoë — 東京 🚚", "lines": [{"sku": "A-1", "attrs": {"gift": true}}]}"#,
        ),
        (
            "o-2",
            "order.created",
            r#"{"total": 1, "note": "say \"hi\" \\ bye"}"#,
        ),
        ("o-1", "order.paid", r#"{"paid": 12345678901234567890}"#),
    ];
    for (aggregate_id, event_type, payload) in rows {
        sqlx::query(
            "INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload, headers)
             VALUES ($1, $2, $3, $4::jsonb, jsonb_build_object('traceparent', $5::text, 'id', 'set-by-the-producer'))",
        )
        .bind(aggregate_type)
        .bind(aggregate_id)
        .bind(event_type)
        .bind(payload)
        .bind(TRACEPARENT)
        .execute(pool)
        .await
        .expect("a plain INSERT into outbox_events");
    }
    sqlx::query_as::<_, (Uuid, String, String)>(
        "SELECT id, aggregate_id, payload::text FROM outbox_events ORDER BY seq",
    )
    .fetch_all(pool)
    .await
    .expect("reading the events back")
    .into_iter()
    .map(|(id, aggregate_id, payload)| Stored {
        id,
        aggregate_id,
        payload,
    })
    .collect()
}

/// Subscribes to `topic` in a fresh consumer group and reads until `n`
/// messages arrived or `deadline` passed.
fn consume_as_debezium_consumer(
    bootstrap: &str,
    topic: &str,
    n: usize,
    deadline: Duration,
) -> Vec<Consumed> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", format!("orders-service-{}", Uuid::new_v4()))
        .set("auto.offset.reset", "earliest")
        .set("enable.auto.commit", "false")
        .create()
        .expect("a kafka consumer");
    consumer.subscribe(&[topic]).expect("subscribing");
    let end = Instant::now() + deadline;
    let mut out = Vec::new();
    while out.len() < n && Instant::now() < end {
        match consumer.poll(Duration::from_millis(200)) {
            None => {}
            Some(Err(e)) => eprintln!("consumer: {e}"),
            Some(Ok(m)) => {
                let text = |v: &[u8]| String::from_utf8(v.to_vec()).expect("a UTF-8 header");
                let (mut ids, mut traceparent) = (Vec::new(), None);
                for h in m.headers().into_iter().flat_map(|h| h.iter()) {
                    match h.key {
                        "id" => ids.push(text(h.value.unwrap_or_default())),
                        "traceparent" => traceparent = Some(text(h.value.unwrap_or_default())),
                        _ => {}
                    }
                }
                out.push(Consumed {
                    topic: m.topic().to_owned(),
                    key: m.key().map(|k| String::from_utf8_lossy(k).into_owned()),
                    ids,
                    traceparent,
                    value: m.payload().unwrap_or_default().to_vec(),
                });
            }
        }
    }
    out
}

/// Creates `topic` with four partitions, as an operator does where the
/// broker does not create topics on first use (tansu, most clusters).
async fn create_topic(bootstrap: &str, topic: &str) {
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .create()
        .expect("a kafka admin client");
    let opts = AdminOptions::new().operation_timeout(Some(Duration::from_secs(10)));
    let results = admin
        .create_topics(
            &[NewTopic::new(topic, 4, TopicReplication::Fixed(1))],
            &opts,
        )
        .await
        .expect("creating the topic");
    for r in results {
        r.unwrap_or_else(|(topic, code)| panic!("creating topic {topic}: {code}"));
    }
}

async fn wait_drained(pool: &PgPool) {
    let end = Instant::now() + Duration::from_secs(60);
    loop {
        let left: i64 = sqlx::query_scalar("SELECT count(*) FROM outbox_events")
            .fetch_one(pool)
            .await
            .unwrap();
        if left == 0 {
            return;
        }
        assert!(
            Instant::now() < end,
            "the relay left {left} events undelivered"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A fresh aggregate type, so runs never read each other's messages.
fn aggregate_type() -> String {
    format!("order{}", &Uuid::new_v4().simple().to_string()[..8])
}

/// The router's topic for `aggregate_type`.
fn router_topic(aggregate_type: &str) -> String {
    format!("outbox.event.{aggregate_type}")
}

/// Runs the case on a broker at `bootstrap` where the router's topic for
/// `aggregate_type` exists.
async fn debezium_consumers_read_our_messages_unchanged(bootstrap: String, aggregate_type: &str) {
    let (_db, pool) = migrated_test_db().await;
    let stored = write_orders(&pool, aggregate_type).await;
    assert_eq!(stored.len(), 3);
    let topic = router_topic(aggregate_type);

    let config = KafkaConfig {
        brokers: vec![bootstrap.clone()],
        event_id_header: "id".into(),
        message_timeout_ms: 5_000,
        ..KafkaConfig::default()
    };
    let publisher = KafkaPublisher::new(config).expect("a kafka publisher");
    let relay = Relay::builder(pool.clone(), publisher)
        .config(relay_config(100))
        .spawn()
        .await
        .expect("starting the relay");
    wait_drained(&pool).await;
    relay.shutdown().await.expect("relay shutdown");

    let got = tokio::task::spawn_blocking(move || {
        consume_as_debezium_consumer(&bootstrap, &topic, 3, Duration::from_secs(60))
    })
    .await
    .unwrap();
    assert_eq!(got.len(), 3, "every event read back: {got:?}");

    for want in &stored {
        let m = got
            .iter()
            .find(|m| m.ids.last().map(String::as_str) == Some(want.id.to_string().as_str()))
            .unwrap_or_else(|| panic!("no message has header id = {}: {got:?}", want.id));
        assert_eq!(m.topic, router_topic(aggregate_type));
        assert_eq!(m.key.as_deref(), Some(want.aggregate_id.as_str()), "key");
        assert_eq!(
            m.ids,
            [want.id.to_string()],
            "exactly one id header, the event id (the producer's `id` header is not forwarded)"
        );
        assert_eq!(
            String::from_utf8_lossy(&m.value),
            want.payload,
            "the value is the payload as stored"
        );
        assert_eq!(m.traceparent.as_deref(), Some(TRACEPARENT));
    }
    // One aggregate's events stay in commit order (one key, one partition).
    let o1: Vec<&str> = got
        .iter()
        .filter(|m| m.key.as_deref() == Some("o-1"))
        .map(|m| m.ids[0].as_str())
        .collect();
    let o1_stored: Vec<String> = stored
        .iter()
        .filter(|s| s.aggregate_id == "o-1")
        .map(|s| s.id.to_string())
        .collect();
    assert_eq!(o1, o1_stored, "o-1's events in commit order");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_debezium_router_consumer_reads_our_messages_on_the_mock_cluster() {
    let mock = MockCluster::new(1).expect("librdkafka's mock cluster");
    let aggregate_type = aggregate_type();
    mock.create_topic(&router_topic(&aggregate_type), 4, 1)
        .expect("creating a mock topic");
    debezium_consumers_read_our_messages_unchanged(mock.bootstrap_servers(), &aggregate_type).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_debezium_router_consumer_reads_our_messages_on_a_real_broker() {
    let Some(tansu) = Tansu::start_or_skip_blocking().await else {
        return;
    };
    let aggregate_type = aggregate_type();
    create_topic(&tansu.bootstrap(), &router_topic(&aggregate_type)).await;
    debezium_consumers_read_our_messages_unchanged(tansu.bootstrap(), &aggregate_type).await;
}
