//! Kafka in `bench e2e`: a throwaway tansu broker (the test kit's
//! launcher, `OUTBOX_TANSU_BIN`), the run's two topics, a reader with
//! rdkafka's consumer, and the reference publish with rdkafka's producer
//! under the relay publisher's guarantees (`acks=all`, idempotence, at most
//! 5 requests in flight, the same key and headers), [`WINDOW`] messages in
//! flight.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{ensure, Context, Result};
use futures::StreamExt;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{Consumer, StreamConsumer};
use rdkafka::error::RDKafkaErrorCode;
use rdkafka::message::{Header, Message, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::{Offset, TopicPartitionList};
use tokio::task::JoinHandle;

use super::check::Arrivals;
use super::shape::{identity, Message as RunMessage, WINDOW};

/// The relay's topic: the default template `outbox.event.{aggregate_type}`.
pub const RELAY_TOPIC: &str = "outbox.event.bench";
/// The reference's topic.
pub const REFERENCE_TOPIC: &str = "reference.bench";
/// Partitions of each topic (the key, the aggregate id, picks one).
const PARTITIONS: i32 = 4;
const TIMEOUT: Duration = Duration::from_secs(10);

/// `bootstrap.servers` of a `kafka://HOST:PORT[,…]` URL.
pub fn bootstrap(url: &str) -> &str {
    url.strip_prefix("kafka://").unwrap_or(url)
}

/// Starts tansu on a free port: the broker's `kafka://` URL and the
/// process (killed on drop).
pub async fn launch() -> Result<(String, outbox_testkit::brokers::kafka::Tansu)> {
    let tansu = tokio::task::spawn_blocking(outbox_testkit::brokers::kafka::Tansu::start)
        .await?
        .context("cannot start tansu, the Kafka-protocol broker")?;
    Ok((format!("kafka://{}", tansu.bootstrap()), tansu))
}

/// Creates both topics (an existing one is kept).
pub async fn prepare(url: &str) -> Result<()> {
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", bootstrap(url))
        .create()
        .context("kafka admin client")?;
    let topics = [RELAY_TOPIC, REFERENCE_TOPIC]
        .map(|t| NewTopic::new(t, PARTITIONS, TopicReplication::Fixed(1)));
    let opts = AdminOptions::new().operation_timeout(Some(TIMEOUT));
    for result in admin
        .create_topics(&topics, &opts)
        .await
        .with_context(|| format!("cannot create the bench's topics on {url}"))?
    {
        if let Err((topic, code)) = result {
            ensure!(
                code == RDKafkaErrorCode::TopicAlreadyExists,
                "cannot create topic {topic}: {code}"
            );
        }
    }
    Ok(())
}

/// Reads `topic` from its current end on (what is published after this
/// returns is read), every partition, in the background.
pub async fn reader(
    url: &str,
    topic: &'static str,
    arrivals: Arc<Arrivals>,
) -> Result<JoinHandle<Result<()>>> {
    let consumer: StreamConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap(url))
        .set("group.id", format!("bench-e2e-{}", uuid::Uuid::new_v4()))
        .set("enable.auto.commit", "false")
        .set("fetch.wait.max.ms", "10")
        .create()
        .context("kafka consumer")?;
    let mut assignment = TopicPartitionList::new();
    for p in 0..PARTITIONS {
        let (_, high) = consumer
            .fetch_watermarks(topic, p, TIMEOUT)
            .with_context(|| format!("cannot read the end of {topic}/{p}"))?;
        assignment.add_partition_offset(topic, p, Offset::Offset(high))?;
    }
    consumer.assign(&assignment)?;
    Ok(tokio::spawn(async move {
        let mut stream = consumer.stream();
        // tansu answers a fetch at the end of a partition with its last
        // record again (same partition, same offset): that is the broker
        // read twice, not the relay publishing twice, so it is counted
        // apart and not recorded.
        let mut read: std::collections::HashSet<(i32, i64)> = std::collections::HashSet::new();
        while let Some(message) = stream.next().await {
            let message = message?;
            if read.insert((message.partition(), message.offset())) {
                arrivals.record(message.payload().unwrap_or_default());
            } else {
                arrivals.read_again();
            }
        }
        anyhow::bail!("the kafka consumer ended")
    }))
}

/// Publishes `messages` to the reference topic, [`WINDOW`] in flight,
/// each awaited for its delivery report.
pub async fn publish(url: &str, messages: impl Iterator<Item = RunMessage>) -> Result<()> {
    let producer: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap(url))
        .set("client.id", "bench-e2e-reference")
        .set("acks", "all")
        .set("enable.idempotence", "true")
        .set("max.in.flight.requests.per.connection", "5")
        .set("message.timeout.ms", "15000")
        .create()
        .context("kafka producer")?;
    let mut messages = messages.peekable();
    while messages.peek().is_some() {
        let mut reports = Vec::with_capacity(WINDOW as usize);
        for (id, a, body) in messages.by_ref().take(WINDOW as usize) {
            let mut headers = OwnedHeaders::new_with_capacity(4);
            for (key, value) in identity(id, a) {
                headers = headers.insert(Header {
                    key,
                    value: Some(value.as_str()),
                });
            }
            let key = a.to_string();
            let record = FutureRecord::to(REFERENCE_TOPIC)
                .key(&key)
                .payload(body.as_bytes())
                .headers(headers);
            reports.push(
                producer
                    .send_result(record)
                    .map_err(|(e, _)| e)
                    .context("queueing a reference message")?,
            );
        }
        for report in reports {
            report
                .await
                .context("the producer dropped a reference message")?
                .map_err(|(e, _)| e)
                .context("kafka did not take a reference message")?;
        }
    }
    Ok(())
}
