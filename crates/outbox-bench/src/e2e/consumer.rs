//! The consumer: reads every message of a run back with the broker's own
//! client (redis `XREAD`, a lapin consumer, a JetStream ordered consumer,
//! an rdkafka consumer, the bench's webhook receiver) and hands each body to the run's
//! [`Arrivals`] (in `check.rs`), which checks it and notes when it
//! arrived.

use std::sync::Arc;

use anyhow::{Context, Result};
use futures::StreamExt;
use tokio::task::JoinHandle;

use super::broker::{amqp_channel, nats_connect, Broker, Destination, Side, AMQP_EXCHANGE};
use super::check::Arrivals;

/// A consumer reading one side's destination; stopped on drop.
pub struct Consumer {
    task: JoinHandle<Result<()>>,
}

impl Consumer {
    /// Subscribes to `side`'s destination on `broker` (from its newest
    /// message on: what is published after this returns is read) and
    /// reads in the background.
    pub async fn start(broker: &Broker, side: Side, arrivals: Arc<Arrivals>) -> Result<Consumer> {
        let task = match broker.destination(side) {
            Destination::Redis { stream } => redis_reader(&broker.url, stream, arrivals).await?,
            Destination::Amqp { routing_key } => {
                amqp_reader(&broker.url, routing_key, arrivals).await?
            }
            Destination::Nats { stream, .. } => nats_reader(&broker.url, stream, arrivals).await?,
            Destination::Kafka { topic } => {
                super::kafka::reader(&broker.url, topic, arrivals).await?
            }
            Destination::Http { url } => {
                let receiver = broker.receiver.as_ref().context("no webhook receiver")?;
                let path = url.strip_prefix(&broker.url).unwrap_or(&url);
                receiver.deliver_to(path, arrivals);
                tokio::spawn(std::future::pending())
            }
        };
        Ok(Consumer { task })
    }

    /// Fails if the consumer has stopped (the broker went away).
    pub async fn check(&mut self) -> Result<()> {
        if self.task.is_finished() {
            (&mut self.task).await??;
            anyhow::bail!("the consumer stopped reading");
        }
        Ok(())
    }
}

impl Drop for Consumer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn redis_reader(
    url: &str,
    stream: &'static str,
    arrivals: Arc<Arrivals>,
) -> Result<JoinHandle<Result<()>>> {
    use redis::streams::{StreamRangeReply, StreamReadOptions, StreamReadReply};
    use redis::AsyncCommands;
    let client = redis::Client::open(url).context("redis url")?;
    let mut conn = client
        .get_multiplexed_async_connection()
        .await
        .with_context(|| format!("cannot connect to redis at {url}"))?;
    let newest: StreamRangeReply = conn.xrevrange_count(stream, "+", "-", 1).await?;
    let mut from = newest
        .ids
        .first()
        .map_or_else(|| "0-0".to_owned(), |e| e.id.clone());
    Ok(tokio::spawn(async move {
        let options = StreamReadOptions::default().block(100).count(1_000);
        loop {
            let reply: Option<StreamReadReply> =
                conn.xread_options(&[stream], &[&from], &options).await?;
            for key in reply.map(|r| r.keys).unwrap_or_default() {
                for entry in key.ids {
                    match entry.map.get("payload") {
                        Some(redis::Value::BulkString(body)) => arrivals.record(body),
                        _ => arrivals.record(b""),
                    }
                    from = entry.id;
                }
            }
        }
    }))
}

async fn amqp_reader(
    url: &str,
    routing_key: &'static str,
    arrivals: Arc<Arrivals>,
) -> Result<JoinHandle<Result<()>>> {
    use lapin::options::{
        BasicConsumeOptions, BasicQosOptions, ExchangeDeclareOptions, QueueBindOptions,
        QueueDeclareOptions,
    };
    use lapin::types::FieldTable;
    let (conn, ch) = amqp_channel(url).await?;
    // The relay's own declaration: a durable topic exchange.
    ch.exchange_declare(
        AMQP_EXCHANGE.into(),
        lapin::ExchangeKind::Topic,
        ExchangeDeclareOptions {
            durable: true,
            ..Default::default()
        },
        FieldTable::default(),
    )
    .await?;
    // A durable queue of this run's own, gone when the consumer is.
    let queue = ch
        .queue_declare(
            "".into(),
            QueueDeclareOptions {
                durable: true,
                exclusive: true,
                ..Default::default()
            },
            FieldTable::default(),
        )
        .await?;
    let name = queue.name().clone();
    ch.queue_bind(
        name.clone(),
        AMQP_EXCHANGE.into(),
        routing_key.into(),
        QueueBindOptions::default(),
        FieldTable::default(),
    )
    .await?;
    ch.basic_qos(2_000, BasicQosOptions::default()).await?;
    let mut consumer = ch
        .basic_consume(
            name,
            "bench-e2e".into(),
            BasicConsumeOptions {
                no_ack: true,
                ..Default::default()
            },
            FieldTable::default(),
        )
        .await?;
    Ok(tokio::spawn(async move {
        let _conn = conn;
        while let Some(delivery) = consumer.next().await {
            arrivals.record(&delivery?.data);
        }
        anyhow::bail!("the rabbitmq consumer was cancelled")
    }))
}

async fn nats_reader(
    url: &str,
    stream: &'static str,
    arrivals: Arc<Arrivals>,
) -> Result<JoinHandle<Result<()>>> {
    use async_nats::jetstream::consumer::{pull::OrderedConfig, DeliverPolicy};
    let js = async_nats::jetstream::new(nats_connect(url).await?);
    let consumer = js
        .get_stream(stream)
        .await
        .with_context(|| format!("no JetStream stream {stream}"))?
        .create_consumer(OrderedConfig {
            deliver_policy: DeliverPolicy::New,
            ..Default::default()
        })
        .await
        .context("cannot create a JetStream consumer")?;
    let mut messages = consumer.messages().await?;
    Ok(tokio::spawn(async move {
        while let Some(message) = messages.next().await {
            arrivals.record(&message?.payload);
        }
        anyhow::bail!("the JetStream consumer ended")
    }))
}
