//! The Kafka publisher: an idempotent rdkafka `FutureProducer` with
//! `acks=all`; an event is delivered when its delivery report says so.
//!
//! What an error means is in `classify.rs`, the message's headers in
//! `message.rs`.

use std::borrow::Cow;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use async_trait::async_trait;
use outbox::{Event, Outcome, Publisher, Unavailable};
use rdkafka::config::{ClientConfig, RDKafkaLogLevel};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::{DeliveryFuture, FutureProducer, FutureRecord, Producer};
use rdkafka::ClientContext;

use super::classify::{failure, settle, Class, Sent};
use super::config::{topic_problem, KafkaConfig};
use super::message::headers;
use crate::broker::publisher::{broker_publisher, PIPELINED_CALLS};
use crate::{Envelope, Error, Template};

/// What librdkafka's global errors said: "all brokers down" is remembered
/// until a delivery or health check succeeds.
struct LinkState {
    all_down: AtomicBool,
    last_error: Mutex<String>,
}

/// The producer's context; shared state survives a producer's renewal.
struct Context(Arc<LinkState>);

impl ClientContext for Context {
    fn log(&self, level: RDKafkaLogLevel, fac: &str, message: &str) {
        match level {
            RDKafkaLogLevel::Emerg
            | RDKafkaLogLevel::Alert
            | RDKafkaLogLevel::Critical
            | RDKafkaLogLevel::Error => tracing::error!(target: "librdkafka", %fac, "{message}"),
            RDKafkaLogLevel::Warning => tracing::warn!(target: "librdkafka", %fac, "{message}"),
            RDKafkaLogLevel::Notice | RDKafkaLogLevel::Info => {
                tracing::info!(target: "librdkafka", %fac, "{message}")
            }
            RDKafkaLogLevel::Debug => tracing::debug!(target: "librdkafka", %fac, "{message}"),
        }
    }

    fn error(&self, error: KafkaError, reason: &str) {
        if error.rdkafka_error_code() == Some(RDKafkaErrorCode::AllBrokersDown) {
            self.0.all_down.store(true, Ordering::SeqCst);
        }
        *self.0.last_error.lock().unwrap_or_else(|p| p.into_inner()) = reason.to_owned();
        tracing::warn!(target: "librdkafka", %error, "{reason}");
    }
}

type Inner = FutureProducer<Context>;

/// Publishes events to Kafka.
///
/// * topic: the event's topic override, or [`KafkaConfig::topic_template`];
/// * key: `aggregate_id` (so one aggregate stays in one partition);
/// * headers: `outbox-event-id`, `outbox-event-type`,
///   `outbox-aggregate-type`, `outbox-aggregate-id`, then the producer's own
///   (`traceparent`, …);
/// * value: the payload's JSON bytes.
///
/// With a CloudEvents [`Envelope`] ([`KafkaPublisher::with_envelope`]) the
/// message follows the Kafka protocol binding: in binary mode `ce_*`
/// headers and `content-type: application/json` replace the `outbox-*`
/// headers; in structured mode the value is the CloudEvent and
/// `content-type` is `application/cloudevents+json`. The key stays the
/// aggregate id (the `partitionkey` attribute) and the producer's headers
/// follow (but for ones named `ce_…`).
///
/// The producer is idempotent with `acks=all`; an event is
/// [`Outcome::Delivered`] only when its delivery report has an offset.
/// See `docs/publishers.md` for how each failure is classified.
pub struct KafkaPublisher {
    config: KafkaConfig,
    topic: Template,
    state: Arc<LinkState>,
    producer: RwLock<Inner>,
    envelope: Envelope,
}

broker_publisher!(KafkaPublisher(KafkaConfig) {
    /// Messages follow `envelope` (plain by default).
    fn with_envelope;
    /// A publisher for `kafka://HOST:PORT[,HOST:PORT…]` with default settings.
    fn from_url;
});

impl KafkaPublisher {
    /// Validates `config` and creates the producer. Nothing is sent yet: a
    /// broker that is down now is not an error here.
    pub fn new(config: KafkaConfig) -> Result<Self, Error> {
        config.validate()?;
        let topic = config.destination_template()?;
        let state = Arc::new(LinkState {
            all_down: AtomicBool::new(false),
            last_error: Mutex::new(String::new()),
        });
        let producer = create(&config, &state)?;
        Ok(KafkaPublisher {
            config,
            topic,
            state,
            producer: RwLock::new(producer),
            envelope: Envelope::plain(),
        })
    }

    fn producer(&self) -> Inner {
        self.producer
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// After a fatal producer error (the idempotent producer lost its
    /// sequence state), replaces the producer with a fresh one.
    fn renew_if_fatal(&self) -> Option<String> {
        let producer = self.producer();
        let (code, reason) = producer.client().fatal_error()?;
        let message =
            format!("kafka producer failed fatally ({code:?}: {reason}); starting a new one");
        tracing::warn!("{message}");
        match create(&self.config, &self.state) {
            Ok(fresh) => *self.producer.write().unwrap_or_else(|p| p.into_inner()) = fresh,
            Err(e) => tracing::error!(error = %e, "could not start a new kafka producer"),
        }
        Some(message)
    }

    async fn metadata_check(&self) -> Result<(), String> {
        let producer = self.producer();
        let timeout = Duration::from_millis(self.config.health_timeout_ms);
        let result = tokio::task::spawn_blocking(move || {
            producer
                .client()
                .fetch_metadata(None, timeout)
                .map(|m| m.brokers().len())
        })
        .await
        .map_err(|e| format!("metadata request panicked: {e}"))?;
        match result {
            Ok(0) => Err("the cluster reported no brokers".to_owned()),
            Ok(_) => {
                self.state.all_down.store(false, Ordering::SeqCst);
                Ok(())
            }
            Err(e) => {
                let last = self
                    .state
                    .last_error
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .clone();
                let last = if last.is_empty() {
                    String::new()
                } else {
                    format!("; last client error: {last}")
                };
                Err(format!(
                    "no kafka broker answered within {} ms ({}): {e}{last}",
                    self.config.health_timeout_ms,
                    self.config.brokers.join(",")
                ))
            }
        }
    }

    /// Queues one event; `Err` is its outcome if it could not be queued.
    async fn enqueue(
        &self,
        producer: &Inner,
        event: &Event,
    ) -> Result<DeliveryFuture, (Class, String)> {
        let topic = self
            .topic
            .destination(event)
            .map_err(|missing| (Class::Permanent, missing.to_string()))?;
        if let Some(problem) = topic_problem(&topic) {
            return Err((
                Class::Permanent,
                format!("invalid kafka topic {topic:?}: it {problem}"),
            ));
        }
        let headers = headers(event, &self.envelope, &self.config.event_id_header);
        let body = self.envelope.body(event);
        let mut record: FutureRecord<'_, str, [u8]> = FutureRecord::to(&topic)
            .key(event.aggregate_id.as_str())
            .payload(body.as_ref())
            .headers(headers);
        // The local queue is bounded (queue.buffering.max.messages): wait
        // for room, up to the message timeout.
        let deadline =
            tokio::time::Instant::now() + Duration::from_millis(self.config.message_timeout_ms);
        loop {
            match producer.send_result(record) {
                Ok(future) => return Ok(future),
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), back))
                    if tokio::time::Instant::now() < deadline =>
                {
                    record = back;
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
                Err((e, _)) => return Err(failure(&e, &topic)),
            }
        }
    }
}

fn create(config: &KafkaConfig, state: &Arc<LinkState>) -> Result<Inner, Error> {
    let mut client = ClientConfig::new();
    for (k, v) in config.client_properties() {
        client.set(k, v);
    }
    client.set_log_level(RDKafkaLogLevel::Warning);
    client
        .create_with_context(Context(state.clone()))
        .map_err(|e| {
            let mut text = e.to_string();
            for (k, v) in &config.properties {
                if KafkaConfig::is_secret(k) && !v.is_empty() {
                    text = text.replace(v.as_str(), "<redacted>");
                }
            }
            Error::Client {
                broker: "kafka",
                message: text,
            }
        })
}

#[async_trait]
impl Publisher for KafkaPublisher {
    fn name(&self) -> &str {
        "kafka"
    }

    fn destination(&self, event: &Event) -> Option<String> {
        self.topic.destination(event).ok().map(Cow::into_owned)
    }

    /// The producer queues and pipelines by itself (idempotent, in order
    /// per partition): a batch that joins while a call waits for its
    /// delivery reports is queued at once in a call of its own. The lanes
    /// never put two events of one aggregate in flight.
    fn concurrent_calls(&self) -> usize {
        PIPELINED_CALLS
    }

    fn events_per_call(&self) -> usize {
        usize::MAX
    }

    async fn publish(&self, batch: &[Event]) -> Result<Vec<Outcome>, Unavailable> {
        if self.state.all_down.load(Ordering::SeqCst) {
            // librdkafka said every broker is down: ask before queueing
            // messages that would only time out.
            self.metadata_check().await.map_err(Unavailable::new)?;
        }
        let producer = self.producer();
        let mut pending: Vec<Result<DeliveryFuture, (Class, String)>> =
            Vec::with_capacity(batch.len());
        for event in batch {
            pending.push(self.enqueue(&producer, event).await);
        }
        let mut results: Vec<Sent> = Vec::with_capacity(batch.len());
        for (event, p) in batch.iter().zip(pending) {
            let topic = || self.topic.destination(event).unwrap_or_default();
            let r = match p {
                Err(failed) => Err(failed),
                Ok(future) => match future.await {
                    Ok(Ok(_delivery)) => Ok(()),
                    Ok(Err((e, _message))) => Err(failure(&e, &topic())),
                    Err(_canceled) => Err((
                        Class::Transport,
                        format!(
                            "kafka producer stopped before reporting on topic {}",
                            topic()
                        ),
                    )),
                },
            };
            results.push(r);
        }
        drop(producer);
        let fatal = self.renew_if_fatal();

        if results.iter().any(Result::is_ok) {
            self.state.all_down.store(false, Ordering::SeqCst);
        }
        settle(results, fatal)
    }

    async fn health(&self) -> Result<(), Unavailable> {
        self.metadata_check().await.map_err(Unavailable::new)
    }

    async fn close(&self) {
        let producer = self.producer();
        let timeout = Duration::from_millis(self.config.message_timeout_ms);
        let flushed = tokio::task::spawn_blocking(move || producer.flush(timeout)).await;
        if let Ok(Err(e)) = flushed {
            tracing::warn!(error = %e, "kafka producer did not flush before closing");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn creation_needs_no_broker_and_hides_secrets() {
        let mut config = KafkaConfig::from_url("kafka://127.0.0.1:1").unwrap();
        config
            .properties
            .insert("sasl.password".into(), "hunter2".into());
        let p = KafkaPublisher::new(config).unwrap();
        assert!(!format!("{p:?}").contains("hunter2"));
        let mut config = KafkaConfig::default();
        config
            .properties
            .insert("no.such.property".into(), "1".into());
        let e = KafkaPublisher::new(config).unwrap_err().to_string();
        assert!(e.contains("no.such.property"), "{e}");
    }
}
