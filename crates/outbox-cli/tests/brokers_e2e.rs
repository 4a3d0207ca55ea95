//! The `outbox` program against real brokers, end to end: events enqueued in
//! PostgreSQL, `outbox relay --drain` run as a child process with a broker
//! publisher, every message read back from the broker.
//!
//! RabbitMQ is started by the test kit (`apt-get install rabbitmq-server`);
//! Kafka is librdkafka's mock cluster, running in this test process on real
//! `127.0.0.1` ports the child connects to. `OUTBOX_SKIP_BROKER_TESTS`
//! naming `rabbitmq` or `kafka` (or `all`) skips the matching test.

#[path = "common/brokers.rs"]
mod brokers;
mod common;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::{Duration, Instant};

use futures::StreamExt;
use lapin::{Connection, ConnectionProperties};
use outbox::Outbox;
use outbox_testkit::brokers::rabbitmq::RabbitMq;
use rdkafka::consumer::Consumer;
use rdkafka::message::{Headers, Message};
use rdkafka::{Offset, TopicPartitionList};
use sqlx::PgPool;
use uuid::Uuid;

const AGGREGATES: usize = 50;
const PER_AGGREGATE: i64 = 40;
/// How long reading every message back may take.
const CONSUME_DEADLINE: Duration = Duration::from_secs(60);

/// The relay's default AMQP exchange (docs/publishers.md).
const EXCHANGE: &str = "outbox";
/// The relay's default Kafka topic for aggregate type `order`.
const KAFKA_TOPIC: &str = "outbox.event.order";
/// Routing key of the test events (the default template is `{event_type}`).
const EVENT_TYPE: &str = "order.updated";
const KAFKA_PARTITIONS: i32 = 4;

/// What an enqueued event should arrive as: aggregate id and position.
type Expected = HashMap<Uuid, (String, i64)>;

/// One message read back from a broker.
#[derive(Debug)]
struct Got {
    /// The event id (`message_id` / header `outbox-event-id`).
    id: String,
    /// The aggregate id (header `outbox-aggregate-id`).
    aggregate: String,
    /// The aggregate id as the broker keyed the message, where it has keys.
    key: Option<String>,
    /// Exchange routing key or Kafka topic.
    destination: String,
    /// Position within the aggregate (`payload.n`).
    n: i64,
}

/// Enqueues `PER_AGGREGATE` rounds of one event per aggregate, each round
/// committed after the previous one, so positions follow commit order.
async fn enqueue_backlog(pool: &PgPool) -> Expected {
    let outbox = Outbox::new();
    let mut expected = Expected::new();
    for n in 1..=PER_AGGREGATE {
        let round: Vec<_> = (0..AGGREGATES)
            .map(|a| common::event(&format!("agg-{a}"), n))
            .collect();
        for e in &round {
            expected.insert(e.id, (e.aggregate_id.clone(), n));
        }
        outbox.enqueue_many(pool, &round).await.unwrap();
    }
    assert_eq!(expected.len(), AGGREGATES * PER_AGGREGATE as usize);
    expected
}

/// Asserts every expected event arrived with its own aggregate, key,
/// destination and position, nothing else arrived, and first deliveries kept
/// per-aggregate order; returns the number of duplicates.
fn check(broker: &str, expected: &Expected, got: &[Got], destination: &str) -> usize {
    let mut deliveries = Vec::with_capacity(got.len());
    for g in got {
        let id: Uuid =
            g.id.parse()
                .unwrap_or_else(|e| panic!("{broker}: message with a bad event id {g:?}: {e}"));
        let Some((aggregate, n)) = expected.get(&id) else {
            panic!("{broker}: a message for an event never enqueued: {g:?}");
        };
        assert_eq!(
            (&g.aggregate, g.n),
            (aggregate, *n),
            "{broker}: message {g:?} does not match its event"
        );
        if let Some(key) = &g.key {
            assert_eq!(key, aggregate, "{broker}: message key of {g:?}");
        }
        assert_eq!(g.destination, destination, "{broker}: destination of {g:?}");
        deliveries.push((id, g.aggregate.as_str(), g.n));
    }
    outbox_testkit::assert_delivered_once_in_order(
        &format!("{broker}: "),
        expected.keys(),
        &deliveries,
    )
}

fn payload_n(data: &[u8]) -> i64 {
    let v: serde_json::Value = serde_json::from_slice(data).unwrap_or_else(|e| {
        panic!(
            "body is not JSON ({e}): {:?}",
            String::from_utf8_lossy(data)
        )
    });
    v["n"]
        .as_i64()
        .unwrap_or_else(|| panic!("body without a numeric n: {v}"))
}

// ---- RabbitMQ ----

fn amqp_got(d: &lapin::message::Delivery) -> Got {
    let headers = outbox_testkit::brokers::rabbitmq::headers_as_text(&d.properties);
    Got {
        id: d
            .properties
            .message_id()
            .as_ref()
            .map(|m| m.as_str().to_owned())
            .unwrap_or_default(),
        aggregate: headers
            .get("outbox-aggregate-id")
            .cloned()
            .unwrap_or_default(),
        key: None,
        destination: d.routing_key.as_str().to_owned(),
        n: payload_n(&d.data),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relay_program_delivers_to_rabbitmq_end_to_end() {
    let Some(rabbit) = RabbitMq::start_or_skip_blocking().await else {
        return;
    };
    eprintln!("rabbitmq ready in {:.2?}", rabbit.last_start_duration());
    let (db, pool) = outbox_testkit::postgres::migrated_test_db().await;

    // A durable queue taking every routing key, bound before anything is
    // published.
    let queue = "brokers-e2e";
    let conn = Connection::connect(&rabbit.url(), ConnectionProperties::default())
        .await
        .expect("connecting to rabbitmq");
    let ch = conn.create_channel().await.expect("channel");
    outbox_testkit::brokers::rabbitmq::bind_queue(&ch, EXCHANGE, queue, "#").await;

    let expected = enqueue_backlog(&pool).await;
    let took = common::drain_with(&db.url, &pool, &rabbit.url(), "brokers-e2e").await;

    // The relay has exited: every confirmed message is in the queue.
    let queued = brokers::amqp_queued(&ch, queue).await;
    let mut consumer = brokers::amqp_consume(&ch, queue, "brokers-e2e").await;
    let deadline = tokio::time::Instant::now() + CONSUME_DEADLINE;
    let mut got = Vec::new();
    let mut ids = HashSet::new();
    while got.len() < queued || ids.len() < expected.len() {
        match tokio::time::timeout_at(deadline, consumer.next()).await {
            Err(_) => {
                eprintln!(
                    "rabbitmq: read back incomplete after {CONSUME_DEADLINE:?}: {} of {queued} queued messages",
                    got.len()
                );
                break;
            }
            Ok(None) => panic!("the consumer stopped after {} messages", got.len()),
            Ok(Some(delivery)) => {
                let g = amqp_got(&delivery.expect("delivery"));
                ids.insert(g.id.clone());
                got.push(g);
            }
        }
    }
    let _ = conn.close(200, "consumed".into()).await;

    let dups = check("rabbitmq", &expected, &got, EVENT_TYPE);
    eprintln!(
        "rabbitmq: {} events enqueued, {} messages consumed, {dups} duplicates (relay drained in {took:.2?})",
        expected.len(),
        got.len()
    );
    assert_eq!(expected.len(), AGGREGATES * PER_AGGREGATE as usize);
}

// ---- Kafka (librdkafka's mock cluster) ----

fn kafka_got(m: &rdkafka::message::BorrowedMessage<'_>) -> Got {
    let mut headers = BTreeMap::new();
    if let Some(h) = m.headers() {
        for header in h.iter() {
            let value = header
                .value
                .map(|v| String::from_utf8_lossy(v).into_owned())
                .unwrap_or_default();
            headers.insert(header.key.to_owned(), value);
        }
    }
    Got {
        id: headers.get("outbox-event-id").cloned().unwrap_or_default(),
        aggregate: headers
            .get("outbox-aggregate-id")
            .cloned()
            .unwrap_or_default(),
        key: Some(
            m.key()
                .map(|k| String::from_utf8_lossy(k).into_owned())
                .unwrap_or_default(),
        ),
        destination: m.topic().to_owned(),
        n: payload_n(m.payload().unwrap_or_default()),
    }
}

/// Reads every partition of `topic` from the beginning until all messages
/// it holds (by its high watermarks) and `expected` distinct events arrived,
/// or `deadline` passed.
fn kafka_read_back(bootstrap: &str, topic: &str, expected: usize, deadline: Duration) -> Vec<Got> {
    let consumer = brokers::kafka_consumer(bootstrap, "brokers-e2e");
    let metadata = consumer
        .fetch_metadata(Some(topic), Duration::from_secs(10))
        .expect("topic metadata");
    let mut assignment = TopicPartitionList::new();
    let mut held = 0_usize;
    for t in metadata.topics() {
        for p in t.partitions() {
            let (low, high) = consumer
                .fetch_watermarks(t.name(), p.id(), Duration::from_secs(10))
                .expect("watermarks");
            held += usize::try_from(high - low).unwrap();
            assignment
                .add_partition_offset(t.name(), p.id(), Offset::Beginning)
                .expect("assignment");
        }
    }
    assert!(assignment.count() > 0, "topic {topic} has no partitions");
    consumer.assign(&assignment).expect("assigning partitions");
    let end = Instant::now() + deadline;
    let mut got = Vec::new();
    let mut ids = HashSet::new();
    while got.len() < held || ids.len() < expected {
        if Instant::now() > end {
            eprintln!(
                "kafka: read back incomplete after {deadline:?}: {} of {held} messages held",
                got.len()
            );
            break;
        }
        match consumer.poll(Duration::from_millis(200)) {
            None => {}
            Some(Err(e)) => eprintln!("kafka consumer: {e}"),
            Some(Ok(m)) => {
                let g = kafka_got(&m);
                ids.insert(g.id.clone());
                got.push(g);
            }
        }
    }
    got
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relay_program_delivers_to_kafka_end_to_end() {
    let Some((mock, bootstrap)) = brokers::kafka_mock_or_skip(3, KAFKA_TOPIC, KAFKA_PARTITIONS)
    else {
        return;
    };
    eprintln!("kafka mock cluster (3 brokers) at {bootstrap}");
    let (db, pool) = outbox_testkit::postgres::migrated_test_db().await;

    let expected = enqueue_backlog(&pool).await;
    let took = common::drain_with(
        &db.url,
        &pool,
        &format!("kafka://{bootstrap}"),
        "brokers-e2e",
    )
    .await;

    let total = expected.len();
    let got = {
        let bootstrap = bootstrap.clone();
        tokio::task::spawn_blocking(move || {
            kafka_read_back(&bootstrap, KAFKA_TOPIC, total, CONSUME_DEADLINE)
        })
        .await
        .unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()))
    };

    let dups = check("kafka", &expected, &got, KAFKA_TOPIC);
    eprintln!(
        "kafka: {} events enqueued, {} messages consumed, {dups} duplicates (relay drained in {took:.2?})",
        expected.len(),
        got.len()
    );
    drop(mock);
}
