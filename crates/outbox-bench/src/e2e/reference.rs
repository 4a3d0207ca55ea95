//! The reference: the same messages published by the broker's own client
//! from one process, with the relay's durability and about as many in
//! flight: `XADD`s pipelined [`WINDOW`] at a time, RabbitMQ persistent
//! messages with publisher confirms awaited per [`WINDOW`], JetStream
//! publishes whose acks are awaited per [`WINDOW`], Kafka records whose
//! delivery reports are awaited per [`WINDOW`], webhook POSTs in
//! [`HTTP_IN_FLIGHT`] lanes by aggregate, each answered before the lane's
//! next (so each aggregate's arrive in order, as the relay's must) — the
//! relay's batch size and the webhook publisher's concurrency.
//!
//! The messages are the relay's, byte for byte where the broker carries
//! them: the same body and the same headers (the event's identity, and for
//! NATS `Nats-Msg-Id`, which makes the stream check for duplicates; for
//! Kafka the aggregate id as key, under the idempotent producer), and
//! webhook requests signed as the publisher signs them (Standard Webhooks:
//! `webhook-id`, `webhook-timestamp`, `webhook-signature`). A reference
//! with fewer headers would send less and ask less of the broker.

use anyhow::{ensure, Context, Result};
use uuid::Uuid;

use super::broker::{amqp_channel, nats_connect, Broker, Destination, Side, AMQP_EXCHANGE};
use super::broker::{AGGREGATE_TYPE, EVENT_TYPE, WEBHOOK_SECRET};
use super::check::body;
use outbox_publishers::http::{sign, SigningKey};

pub use super::shape::{identity, Message, WINDOW};
/// Requests in flight to the webhook (the publisher's default concurrency).
pub const HTTP_IN_FLIGHT: usize = 16;

/// Publishes events `0..events` of a run over `aggregates` aggregates to the
/// reference destination of `broker`.
pub async fn publish(broker: &Broker, events: u64, aggregates: u32) -> Result<()> {
    match broker.destination(Side::Reference) {
        Destination::Redis { stream } => publish_redis(broker, stream, events, aggregates).await,
        Destination::Amqp { routing_key } => {
            publish_amqp(broker, routing_key, events, aggregates).await
        }
        Destination::Nats { subject, .. } => {
            publish_nats(broker, subject, events, aggregates).await
        }
        Destination::Kafka { .. } => {
            super::kafka::publish(&broker.url, (0..events).map(|i| message(i, aggregates))).await
        }
        Destination::Http { url } => publish_http(&url, events, aggregates).await,
    }
}

/// Event `i` of a run over `aggregates` aggregates: a new id, its
/// aggregate, its body.
fn message(i: u64, aggregates: u32) -> Message {
    (
        Uuid::new_v4(),
        i % u64::from(aggregates),
        body(i, aggregates),
    )
}

/// `XADD`s to `stream`, pipelined [`WINDOW`] at a time.
async fn publish_redis(broker: &Broker, stream: &str, events: u64, aggregates: u32) -> Result<()> {
    let client = redis::Client::open(broker.url.as_str())?;
    let mut conn = client.get_multiplexed_async_connection().await?;
    for start in (0..events).step_by(WINDOW as usize) {
        let mut pipe = redis::pipe();
        for i in start..(start + WINDOW).min(events) {
            let (id, a, body) = message(i, aggregates);
            pipe.cmd("XADD")
                .arg(stream)
                .arg("*")
                .arg("id")
                .arg(id.to_string())
                .arg("aggregate_type")
                .arg(AGGREGATE_TYPE)
                .arg("aggregate_id")
                .arg(a.to_string())
                .arg("event_type")
                .arg(EVENT_TYPE)
                .arg("payload")
                .arg(body);
        }
        let _: Vec<String> = pipe.query_async(&mut conn).await?;
    }
    Ok(())
}

/// Persistent messages to `routing_key`, their publisher confirms awaited
/// per [`WINDOW`].
async fn publish_amqp(
    broker: &Broker,
    routing_key: &str,
    events: u64,
    aggregates: u32,
) -> Result<()> {
    use lapin::options::{BasicPublishOptions, ConfirmSelectOptions};
    use lapin::types::{AMQPValue, FieldTable, LongString};
    let (_conn, ch) = amqp_channel(&broker.url).await?;
    ch.confirm_select(ConfirmSelectOptions::default()).await?;
    for start in (0..events).step_by(WINDOW as usize) {
        let mut confirms = Vec::with_capacity(WINDOW as usize);
        for i in start..(start + WINDOW).min(events) {
            let (id, a, body) = message(i, aggregates);
            let mut headers = FieldTable::default();
            for (k, v) in identity(id, a) {
                headers.insert(k.into(), AMQPValue::LongString(LongString::from(v)));
            }
            let props = lapin::BasicProperties::default()
                .with_content_type("application/json".into())
                .with_delivery_mode(2)
                .with_message_id(id.to_string().into())
                .with_type(EVENT_TYPE.into())
                .with_timestamp(chrono::Utc::now().timestamp().unsigned_abs())
                .with_headers(headers);
            let options = BasicPublishOptions {
                mandatory: true,
                ..Default::default()
            };
            confirms.push(
                ch.basic_publish(
                    AMQP_EXCHANGE.into(),
                    routing_key.into(),
                    options,
                    body.as_bytes(),
                    props,
                )
                .await?,
            );
        }
        for confirm in confirms {
            let confirmation = confirm.await?;
            ensure!(
                confirmation.is_ack(),
                "rabbitmq did not take a reference message"
            );
        }
    }
    Ok(())
}

/// JetStream publishes to `subject`, their acks awaited per [`WINDOW`].
async fn publish_nats(
    broker: &Broker,
    subject: &'static str,
    events: u64,
    aggregates: u32,
) -> Result<()> {
    let js = async_nats::jetstream::new(nats_connect(&broker.url).await?);
    for start in (0..events).step_by(WINDOW as usize) {
        let mut acks = Vec::with_capacity(WINDOW as usize);
        for i in start..(start + WINDOW).min(events) {
            let (id, a, body) = message(i, aggregates);
            let mut headers = async_nats::HeaderMap::new();
            headers.insert("Nats-Msg-Id", id.to_string().as_str());
            for (k, v) in identity(id, a) {
                headers.insert(k, v.as_str());
            }
            acks.push(
                js.publish_with_headers(subject, headers, body.into())
                    .await
                    .context("jetstream publish")?,
            );
        }
        for ack in
            futures::future::join_all(acks.into_iter().map(std::future::IntoFuture::into_future))
                .await
        {
            ack.context("jetstream did not acknowledge a reference message")?;
        }
    }
    Ok(())
}

/// Signed webhook POSTs to `url` in [`HTTP_IN_FLIGHT`] lanes by
/// aggregate, each answered before the lane's next.
async fn publish_http(url: &str, events: u64, aggregates: u32) -> Result<()> {
    let client = reqwest::Client::builder().tcp_nodelay(true).build()?;
    let key = SigningKey::parse(WEBHOOK_SECRET).map_err(anyhow::Error::msg)?;
    let post = |i: u64| {
        let (id, a, body) = message(i, aggregates);
        let id_text = id.to_string();
        let timestamp = chrono::Utc::now().timestamp();
        let signature = sign(&key, &id_text, timestamp, body.as_bytes());
        let mut request = client
            .post(url)
            .header("content-type", "application/json")
            .header("webhook-id", id_text)
            .header("webhook-timestamp", timestamp.to_string())
            .header("webhook-signature", signature);
        for (k, v) in identity(id, a) {
            request = request.header(k, v);
        }
        async move {
            let answer = request
                .body(body)
                .send()
                .await
                .context("reference webhook request")?;
            ensure!(
                answer.status().is_success(),
                "the receiver answered {}",
                answer.status()
            );
            Ok(())
        }
    };
    // Lanes by aggregate, each posting its events one at a time: an
    // aggregate's events arrive in order, as the relay's do.
    let lanes = HTTP_IN_FLIGHT as u64;
    let lane = |lane: u64| {
        let post = &post;
        async move {
            for i in (0..events).filter(|i| i % u64::from(aggregates) % lanes == lane) {
                post(i).await?;
            }
            Ok::<(), anyhow::Error>(())
        }
    };
    futures::future::try_join_all((0..lanes).map(lane)).await?;
    Ok(())
}
