//! The Kafka publisher: an idempotent rdkafka `FutureProducer` with
//! `acks=all`; an event is delivered when its delivery report says so.
//!
//! One file for the producer's life cycle and its error classification:
//! librdkafka's error codes are only meaningful next to the calls that
//! return them.
//!
//! Longer than most files: the publisher, its delivery-error classes and
//! its unit tests (at the end).

use std::borrow::Cow;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use async_trait::async_trait;
use outbox::{Event, Outcome, Publisher, Unavailable};
use rdkafka::config::{ClientConfig, RDKafkaLogLevel};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{DeliveryFuture, FutureProducer, FutureRecord, Producer};
use rdkafka::ClientContext;

use super::config::{topic_problem, KafkaConfig};
use crate::broker::publisher::broker_publisher;
use crate::cloudevents::{Format, KAFKA};
use crate::{Envelope, Error, Template};

/// What the publisher does with one failed message, by error kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Class {
    /// The broker can never take it: dead-letter at once.
    Permanent,
    /// May pass for this message: retry after a backoff.
    Transient,
    /// The brokers are unreachable: an outage, no attempt counted if the
    /// whole batch failed this way.
    Transport,
}

/// Sorts a librdkafka error code into a [`Class`].
pub(crate) fn classify(code: RDKafkaErrorCode) -> Class {
    use RDKafkaErrorCode as C;
    match code {
        // The message or its destination is unacceptable, now and later.
        C::MessageSizeTooLarge
        | C::InvalidMessageSize
        | C::MessageBatchTooLarge
        | C::InvalidMessage
        | C::InvalidTopic
        | C::InvalidRecord
        | C::InvalidTimestamp
        | C::PolicyViolation
        | C::UnsupportedForMessageFormat
        | C::BadMessage
        | C::InvalidArgument => Class::Permanent,
        // Nothing reached a broker, or the cluster refuses every request
        // (credentials, ACLs): no single event is to blame.
        C::MessageTimedOut
        | C::AllBrokersDown
        | C::BrokerTransportFailure
        | C::BrokerNotAvailable
        | C::NetworkException
        | C::RequestTimedOut
        | C::OperationTimedOut
        | C::TimedOutQueue
        | C::Resolve
        | C::SSL
        | C::Authentication
        | C::SaslAuthenticationFailed
        | C::ClusterAuthorizationFailed
        | C::TopicAuthorizationFailed
        | C::BrokerDestroy
        | C::DestroyBroker
        | C::PurgeQueue
        | C::PurgeInflight
        | C::Fatal
        | C::QueueFull => Class::Transport,
        // Leader elections, unknown topics (auto-creation or an operator may
        // fix them), replicas catching up, and anything unexpected.
        _ => Class::Transient,
    }
}

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
        let headers = self.headers(event);
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
                Err((e, _)) => {
                    let code = e.rdkafka_error_code().unwrap_or(RDKafkaErrorCode::Fail);
                    return Err((classify(code), describe(&e, &topic)));
                }
            }
        }
    }
}

impl KafkaPublisher {
    /// The headers of `event`'s message in the publisher's format.
    fn headers(&self, event: &Event) -> OwnedHeaders {
        if self.envelope.is_plain() {
            let mut headers = OwnedHeaders::new_with_capacity(4 + event.headers.len());
            for (key, value) in event.message_headers() {
                headers = headers.insert(Header {
                    key: &key,
                    value: Some(value.as_str()),
                });
            }
            return headers;
        }
        let mut headers = OwnedHeaders::new_with_capacity(11 + event.headers.len());
        if self.envelope.format() == Format::CloudEventsBinary {
            self.envelope
                .binary_attributes(event, &KAFKA, |key, value| {
                    headers = std::mem::take(&mut headers).insert(Header {
                        key,
                        value: Some(value),
                    });
                });
        }
        headers = headers.insert(Header {
            key: "content-type",
            value: Some(self.envelope.content_type()),
        });
        for (key, value) in &event.headers {
            if Envelope::forwards(&KAFKA, key) {
                headers = headers.insert(Header {
                    key,
                    value: Some(value.as_str()),
                });
            }
        }
        headers
    }
}

fn describe(e: &KafkaError, topic: &str) -> String {
    match e.rdkafka_error_code() {
        Some(RDKafkaErrorCode::MessageSizeTooLarge) => format!(
            "kafka refused the message to topic {topic}: larger than message.max.bytes ({e})"
        ),
        _ => format!("kafka, topic {topic}: {e}"),
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
        let mut results: Vec<Result<(), (Class, String)>> = Vec::with_capacity(batch.len());
        for (event, p) in batch.iter().zip(pending) {
            let topic = || self.topic.destination(event).unwrap_or_default();
            let r = match p {
                Err(failed) => Err(failed),
                Ok(future) => match future.await {
                    Ok(Ok(_delivery)) => Ok(()),
                    Ok(Err((e, _message))) => {
                        let code = e.rdkafka_error_code().unwrap_or(RDKafkaErrorCode::Fail);
                        Err((classify(code), describe(&e, &topic())))
                    }
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

        let delivered = results.iter().filter(|r| r.is_ok()).count();
        if delivered > 0 {
            self.state.all_down.store(false, Ordering::SeqCst);
        }
        let transport = results.iter().find_map(|r| match r {
            Err((Class::Transport, m)) => Some(m.clone()),
            _ => None,
        });
        if delivered == 0 {
            if let Some(message) = fatal.or(transport) {
                // Nothing got through and the transport failed: an outage.
                // Rejections in this batch are found again on the next try.
                return Err(Unavailable::new(message));
            }
        }
        Ok(results
            .into_iter()
            .map(|r| match r {
                Ok(()) => Outcome::Delivered,
                Err((Class::Permanent, m)) => Outcome::Rejected(m),
                // Others got through: this one waits for the transport
                // without an attempt counted against it.
                Err((Class::Transport, m)) => Outcome::Unavailable(m),
                Err((_, m)) => Outcome::Retry(m),
            })
            .collect())
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
    fn errors_are_classified() {
        assert_eq!(
            classify(RDKafkaErrorCode::MessageSizeTooLarge),
            Class::Permanent
        );
        assert_eq!(classify(RDKafkaErrorCode::InvalidTopic), Class::Permanent);
        assert_eq!(
            classify(RDKafkaErrorCode::MessageTimedOut),
            Class::Transport
        );
        assert_eq!(classify(RDKafkaErrorCode::AllBrokersDown), Class::Transport);
        assert_eq!(
            classify(RDKafkaErrorCode::NotLeaderForPartition),
            Class::Transient
        );
        assert_eq!(
            classify(RDKafkaErrorCode::UnknownTopicOrPartition),
            Class::Transient
        );
    }

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
