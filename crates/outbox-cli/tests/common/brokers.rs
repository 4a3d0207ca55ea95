//! Reading messages back from the brokers the relay published to: Kafka
//! (librdkafka's mock cluster, in the test process) and RabbitMQ. Each
//! test binary that includes it uses only some of it.
#![allow(dead_code)]

use lapin::options::{BasicConsumeOptions, QueueDeclareOptions};
use lapin::types::FieldTable;
use outbox_testkit::brokers::{skipped, SKIP_ENV};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::BaseConsumer;
use rdkafka::mocking::MockCluster;
use rdkafka::producer::DefaultProducerContext;

/// A mock Kafka cluster of `brokers` brokers holding `topic` with
/// `partitions` partitions, each on every broker, and its bootstrap
/// servers; `None`, said on stderr, if `SKIP_ENV` names kafka.
pub fn kafka_mock_or_skip(
    brokers: i32,
    topic: &str,
    partitions: i32,
) -> Option<(MockCluster<'static, DefaultProducerContext>, String)> {
    if skipped("kafka") {
        eprintln!("skipped: {SKIP_ENV} names kafka");
        return None;
    }
    let mock = MockCluster::new(brokers).expect("starting librdkafka's mock cluster");
    mock.create_topic(topic, partitions, brokers)
        .expect("creating the topic");
    let bootstrap = mock.bootstrap_servers();
    Some((mock, bootstrap))
}

/// A Kafka consumer on `bootstrap` in a group of its own (`group_prefix`
/// and a random suffix) that reads from the earliest offset and commits
/// nothing.
pub fn kafka_consumer(bootstrap: &str, group_prefix: &str) -> BaseConsumer {
    ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set(
            "group.id",
            format!("{group_prefix}-{}", uuid::Uuid::new_v4()),
        )
        .set("enable.auto.commit", "false")
        .set("auto.offset.reset", "earliest")
        .create()
        .expect("kafka consumer")
}

/// Consumes `queue` on `ch` as `tag`, without acknowledgements.
pub async fn amqp_consume(ch: &lapin::Channel, queue: &str, tag: &str) -> lapin::Consumer {
    let options = BasicConsumeOptions {
        no_ack: true,
        ..Default::default()
    };
    ch.basic_consume(queue.into(), tag.into(), options, FieldTable::default())
        .await
        .expect("basic.consume")
}

/// How many messages `queue` holds, by a passive `queue.declare` on `ch`.
pub async fn amqp_queued(ch: &lapin::Channel, queue: &str) -> usize {
    let options = QueueDeclareOptions {
        passive: true,
        ..Default::default()
    };
    let declared = ch
        .queue_declare(queue.into(), options, FieldTable::default())
        .await
        .expect("passive queue.declare");
    declared.message_count() as usize
}
