//! The SQS and SNS publishers: a wave's events become messages, split into
//! `SendMessageBatch` / `PublishBatch` calls of up to 10 entries (and
//! `max_message_bytes` together), sent concurrently up to
//! `max_concurrent_calls`; an event is delivered when the service listed
//! its entry as successful.
//!
//! One core serves both services: they differ only in the call that sends
//! a batch, in how a destination is named and in the health check.
//!
//! Longer than most files: SQS and SNS share one core (batching, the size
//! split, outcome classes) that the two publishers wrap; its unit tests are
//! at the end.

use std::collections::HashMap;
use std::time::Duration;

use async_trait::async_trait;
use aws_config::retry::RetryConfig;
use aws_config::timeout::TimeoutConfig;
use aws_config::{BehaviorVersion, Region, SdkConfig};
use futures::stream::{self, StreamExt};
use outbox::{Event, Outcome, Publisher, Unavailable};
use tokio::sync::OnceCell;

use super::classify::{classify_call, classify_entry, CallFailure};
use super::config::{
    queue_url_name, topic_arn_parts, valid_queue_name, Common, SnsConfig, SqsConfig,
    MAX_BATCH_ENTRIES,
};
use super::message::{message, Message, STRING};
use crate::{Envelope, Error};

/// The service's client.
#[derive(Debug, Clone)]
enum Service {
    Sqs(aws_sdk_sqs::Client),
    Sns(aws_sdk_sns::Client),
}

/// Which service a core talks to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Sqs,
    Sns,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Sqs => "sqs",
            Kind::Sns => "sns",
        }
    }
}

/// Where a call goes: a queue URL or a topic ARN.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Target {
    address: String,
    /// How errors name it: `sqs queue NAME`, `sns topic ARN`.
    shown: String,
    fifo: bool,
}

/// The entries of one call: (index in the batch, message).
type Chunk = Vec<(usize, Message)>;

/// What SQS and SNS publishers share.
struct Core {
    kind: Kind,
    /// The queue (name or URL) or topic ARN of events without a topic
    /// override.
    destination: String,
    common: Common,
    service: OnceCell<Service>,
    /// The message format.
    envelope: Envelope,
    /// Queue names resolved with `GetQueueUrl`.
    urls: std::sync::Mutex<HashMap<String, String>>,
}

impl std::fmt::Debug for Core {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Core")
            .field("kind", &self.kind)
            .field("destination", &self.destination)
            .finish_non_exhaustive()
    }
}

/// The SDK's configuration: region, credentials and endpoint from the
/// standard chain, our settings winning; rustls (ring) for TLS; no retries
/// inside the SDK (the relay owns backoff).
async fn sdk_config(kind: Kind, common: &Common) -> Result<SdkConfig, String> {
    use aws_smithy_http_client::tls::{rustls_provider::CryptoMode, Provider};
    let http = aws_smithy_http_client::Builder::new()
        .tls_provider(Provider::Rustls(CryptoMode::Ring))
        .build_https();
    let timeouts = TimeoutConfig::builder()
        .operation_timeout(Duration::from_millis(common.timeout_ms))
        .connect_timeout(Duration::from_millis(common.connect_timeout_ms))
        .build();
    let mut loader = aws_config::defaults(BehaviorVersion::latest())
        .http_client(http)
        .timeout_config(timeouts)
        .retry_config(RetryConfig::disabled());
    if let Some(region) = &common.region {
        loader = loader.region(Region::new(region.clone()));
    }
    if let Some(endpoint) = &common.endpoint_url {
        loader = loader.endpoint_url(endpoint);
    }
    let config = loader.load().await;
    if config.region().is_some() {
        return Ok(config);
    }
    match &common.fallback_region {
        Some(region) => Ok(config
            .into_builder()
            .region(Region::new(region.clone()))
            .build()),
        None => Err(format!(
            "{}: no AWS region: set AWS_REGION (or a profile's region, or region in [publisher.{}])",
            kind.name(),
            kind.name()
        )),
    }
}

/// A hint for errors that come from missing or refused credentials.
fn with_hint(text: String) -> String {
    let lower = text.to_ascii_lowercase();
    if lower.contains("credential") && !lower.contains("aws_access_key_id") {
        format!(
            "{text} (credentials come from AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, AWS_PROFILE, web identity or an instance role)"
        )
    } else {
        text
    }
}

impl Core {
    fn new(kind: Kind, destination: String, common: Common) -> Core {
        Core {
            kind,
            destination,
            common,
            service: OnceCell::new(),
            envelope: Envelope::plain(),
            urls: std::sync::Mutex::new(HashMap::new()),
        }
    }

    /// The client, made on first use (loading the SDK's configuration).
    async fn service(&self) -> Result<&Service, String> {
        self.service
            .get_or_try_init(|| async {
                let config = sdk_config(self.kind, &self.common).await?;
                Ok(match self.kind {
                    Kind::Sqs => Service::Sqs(aws_sdk_sqs::Client::new(&config)),
                    Kind::Sns => Service::Sns(aws_sdk_sns::Client::new(&config)),
                })
            })
            .await
    }

    /// Where `destination` (a queue name or URL, or a topic ARN) is,
    /// resolving a queue name once with `GetQueueUrl`.
    async fn target(&self, service: &Service, destination: &str) -> Result<Target, CallFailure> {
        match service {
            Service::Sqs(client) => {
                let name = if destination.contains("://") {
                    let Some(name) = queue_url_name(destination) else {
                        return Err(CallFailure::Invalid(format!(
                            "{destination:?} is not a queue URL or name"
                        )));
                    };
                    return Ok(Target {
                        address: destination.to_owned(),
                        shown: format!("sqs queue {name}"),
                        fifo: name.ends_with(".fifo"),
                    });
                } else {
                    destination
                };
                if !valid_queue_name(name) {
                    return Err(CallFailure::Invalid(format!(
                        "{:?} is not a queue name (letters, digits, - and _, up to 80 characters, .fifo at the end for FIFO)",
                        outbox::redact::shorten(name, 100)
                    )));
                }
                let shown = format!("sqs queue {name}");
                let known = self.urls.lock().unwrap().get(name).cloned();
                let address = match known {
                    Some(url) => url,
                    None => {
                        let answer = client
                            .get_queue_url()
                            .queue_name(name)
                            .send()
                            .await
                            .map_err(|e| classify_call(&e, &format!("{shown} (GetQueueUrl)")))?;
                        let url = answer.queue_url().unwrap_or_default().to_owned();
                        if url.is_empty() {
                            return Err(CallFailure::Retry(format!(
                                "{shown}: GetQueueUrl answered no URL"
                            )));
                        }
                        self.urls
                            .lock()
                            .unwrap()
                            .insert(name.to_owned(), url.clone());
                        url
                    }
                };
                Ok(Target {
                    address,
                    shown,
                    fifo: name.ends_with(".fifo"),
                })
            }
            Service::Sns(_) => match topic_arn_parts(destination) {
                Some(_) => Ok(Target {
                    address: destination.to_owned(),
                    shown: format!("sns topic {destination}"),
                    fifo: destination.ends_with(".fifo"),
                }),
                None => Err(CallFailure::Invalid(format!(
                    "{:?} is not a topic ARN (arn:aws:sns:REGION:ACCOUNT:NAME)",
                    outbox::redact::shorten(destination, 100)
                ))),
            },
        }
    }

    /// Splits `entries` into calls of up to 10 entries and
    /// `max_message_bytes` together.
    fn chunks(&self, entries: Vec<(usize, Message)>) -> Vec<Chunk> {
        let mut out: Vec<Chunk> = Vec::new();
        let mut bytes = 0;
        for entry in entries {
            let full = out.last().is_none_or(|c| {
                c.len() >= MAX_BATCH_ENTRIES || bytes + entry.1.size > self.common.max_message_bytes
            });
            if full {
                out.push(Vec::with_capacity(MAX_BATCH_ENTRIES));
                bytes = 0;
            }
            bytes += entry.1.size;
            out.last_mut().expect("pushed above").push(entry);
        }
        out
    }

    /// One batch call: each entry's outcome, or what the call as a whole
    /// came to.
    async fn call(
        &self,
        service: &Service,
        target: &Target,
        chunk: &[(usize, Message)],
    ) -> Result<Vec<(usize, Outcome)>, CallFailure> {
        let built = |e: aws_sdk_sqs::error::BuildError| {
            CallFailure::Invalid(format!("{}: {e}", target.shown))
        };
        // The batch entries of `chunk`: the services' builders differ in
        // type and in the name of the body, not in what they are given.
        macro_rules! entries {
            ($entry:ty, $attribute:ty, $body:ident) => {{
                let mut entries = Vec::with_capacity(chunk.len());
                for (n, (_, m)) in chunk.iter().enumerate() {
                    let mut b = <$entry>::builder()
                        .id(n.to_string())
                        .$body(&m.body)
                        .set_message_group_id(m.group_id.clone())
                        .set_message_deduplication_id(m.dedup_id.clone());
                    for (name, value) in &m.attributes {
                        let v = <$attribute>::builder()
                            .data_type(STRING)
                            .string_value(value)
                            .build()
                            .map_err(built)?;
                        b = b.message_attributes(name, v);
                    }
                    entries.push(b.build().map_err(built)?);
                }
                entries
            }};
        }
        let mut answers: Vec<Option<Outcome>> = vec![None; chunk.len()];
        // The answer for the entry the service calls `id`.
        let mut answer = |id: &str, outcome: Outcome| {
            if let Some(a) = id.parse::<usize>().ok().and_then(|n| answers.get_mut(n)) {
                *a = Some(outcome);
            }
        };
        match service {
            Service::Sqs(client) => {
                use aws_sdk_sqs::types::{MessageAttributeValue, SendMessageBatchRequestEntry};
                let entries = entries!(
                    SendMessageBatchRequestEntry,
                    MessageAttributeValue,
                    message_body
                );
                let out = client
                    .send_message_batch()
                    .queue_url(&target.address)
                    .set_entries(Some(entries))
                    .send()
                    .await
                    .map_err(|e| classify_call(&e, &target.shown))?;
                for s in out.successful() {
                    answer(s.id(), Outcome::Delivered);
                }
                for f in out.failed() {
                    answer(f.id(), classify_entry(f.code(), f.message(), &target.shown));
                }
            }
            Service::Sns(client) => {
                use aws_sdk_sns::types::{MessageAttributeValue, PublishBatchRequestEntry};
                let entries = entries!(PublishBatchRequestEntry, MessageAttributeValue, message);
                let out = client
                    .publish_batch()
                    .topic_arn(&target.address)
                    .set_publish_batch_request_entries(Some(entries))
                    .send()
                    .await
                    .map_err(|e| classify_call(&e, &target.shown))?;
                for s in out.successful() {
                    answer(s.id().unwrap_or_default(), Outcome::Delivered);
                }
                for f in out.failed() {
                    answer(f.id(), classify_entry(f.code(), f.message(), &target.shown));
                }
            }
        }
        Ok(chunk
            .iter()
            .zip(answers)
            .map(|((i, _), a)| {
                let a = a.unwrap_or_else(|| {
                    Outcome::Retry(format!(
                        "{}: the answer did not list this entry",
                        target.shown
                    ))
                });
                (*i, a)
            })
            .collect())
    }

    /// Every entry of `chunk` with `failure`'s outcome (an invalid call of
    /// one entry rejects it).
    fn all(chunk: &[(usize, Message)], failure: CallFailure) -> Vec<(usize, Outcome)> {
        let outcome = match failure {
            CallFailure::Outage(why) => Outcome::Unavailable(why),
            CallFailure::Retry(why) => Outcome::Retry(why),
            CallFailure::Invalid(why) if chunk.len() == 1 => Outcome::Rejected(why),
            CallFailure::Invalid(why) => Outcome::Retry(why),
        };
        chunk.iter().map(|(i, _)| (*i, outcome.clone())).collect()
    }

    /// One call; a call refused for its input is sent again entry by entry,
    /// so that only the invalid entries are rejected.
    async fn send(
        &self,
        service: &Service,
        target: &Target,
        chunk: Chunk,
    ) -> Vec<(usize, Outcome)> {
        match self.call(service, target, &chunk).await {
            Ok(outcomes) => outcomes,
            Err(CallFailure::Invalid(_)) if chunk.len() > 1 => {
                let mut out = Vec::with_capacity(chunk.len());
                for entry in chunk {
                    let one = std::slice::from_ref(&entry);
                    match self.call(service, target, one).await {
                        Ok(o) => out.extend(o),
                        Err(failure) => out.extend(Core::all(one, failure)),
                    }
                }
                out
            }
            Err(failure) => Core::all(&chunk, failure),
        }
    }

    async fn publish(&self, batch: &[Event]) -> Result<Vec<Outcome>, Unavailable> {
        let service = self.service().await.map_err(Unavailable::new)?;
        let mut outcomes: Vec<Option<Outcome>> = vec![None; batch.len()];

        // Events by destination, in batch order.
        let mut destinations: Vec<(&str, Vec<usize>)> = Vec::new();
        for (i, event) in batch.iter().enumerate() {
            let d = event.topic.as_deref().unwrap_or(&self.destination);
            match destinations.iter_mut().find(|(x, _)| *x == d) {
                Some((_, v)) => v.push(i),
                None => destinations.push((d, vec![i])),
            }
        }

        let mut calls: Vec<(Target, Chunk)> = Vec::new();
        for (destination, indices) in destinations {
            let target = match self.target(service, destination).await {
                Ok(t) => t,
                Err(failure) => {
                    let why = match &failure {
                        CallFailure::Outage(w)
                        | CallFailure::Retry(w)
                        | CallFailure::Invalid(w) => w.clone(),
                    };
                    let outcome = match failure {
                        CallFailure::Invalid(_) => Outcome::Rejected(why),
                        CallFailure::Retry(_) => Outcome::Retry(why),
                        CallFailure::Outage(_) => Outcome::Unavailable(why),
                    };
                    for i in indices {
                        outcomes[i] = Some(outcome.clone());
                    }
                    continue;
                }
            };
            let mut entries = Vec::with_capacity(indices.len());
            for i in indices {
                match message(
                    &batch[i],
                    &self.envelope,
                    target.fifo,
                    self.common.max_message_bytes,
                ) {
                    Ok(m) => entries.push((i, m)),
                    Err(why) => {
                        outcomes[i] = Some(Outcome::Rejected(format!("{}: {why}", target.shown)))
                    }
                }
            }
            for chunk in self.chunks(entries) {
                calls.push((target.clone(), chunk));
            }
        }

        let settled: Vec<Vec<(usize, Outcome)>> = stream::iter(calls)
            .map(|(target, chunk)| async move { self.send(service, &target, chunk).await })
            .buffer_unordered(self.common.max_concurrent_calls)
            .collect()
            .await;
        for (i, outcome) in settled.into_iter().flatten() {
            outcomes[i] = Some(outcome);
        }
        let outcomes: Vec<Outcome> = outcomes
            .into_iter()
            .map(|o| o.unwrap_or_else(|| Outcome::Retry(format!("{}: not sent", self.kind.name()))))
            .collect();

        // Nothing got through and the transport is down: an outage of the
        // whole batch.
        let outage = outcomes.iter().find_map(|o| match o {
            Outcome::Unavailable(why) => Some(why.clone()),
            _ => None,
        });
        match outage {
            Some(why) if !outcomes.contains(&Outcome::Delivered) => {
                Err(Unavailable::new(with_hint(why)))
            }
            _ => Ok(outcomes),
        }
    }

    async fn health(&self) -> Result<(), Unavailable> {
        let service = self.service().await.map_err(Unavailable::new)?;
        let failed = |f: CallFailure| match f {
            CallFailure::Outage(w) | CallFailure::Retry(w) | CallFailure::Invalid(w) => {
                Unavailable::new(with_hint(w))
            }
        };
        let target = self
            .target(service, &self.destination)
            .await
            .map_err(failed)?;
        match service {
            Service::Sqs(client) => client
                .get_queue_attributes()
                .queue_url(&target.address)
                .attribute_names(aws_sdk_sqs::types::QueueAttributeName::QueueArn)
                .send()
                .await
                .map(|_| ())
                .map_err(|e| {
                    failed(classify_call(
                        &e,
                        &format!("{} (GetQueueAttributes)", target.shown),
                    ))
                }),
            Service::Sns(client) => client
                .get_topic_attributes()
                .topic_arn(&target.address)
                .send()
                .await
                .map(|_| ())
                .map_err(|e| {
                    failed(classify_call(
                        &e,
                        &format!("{} (GetTopicAttributes)", target.shown),
                    ))
                }),
        }
    }
}

/// A publisher over [`Core`]: `$name`, settings `$config` whose
/// `$destination` field is the queue or topic, service `$kind`, reported as
/// `$short`; `$spec` documents `from_spec`, `$health` the health check.
macro_rules! aws_publisher {
    (
        $(#[$doc:meta])*
        $name:ident($config:ident, $kind:expr, $destination:ident, $short:literal),
        spec: $spec:literal,
        health: $health:literal $(,)?
    ) => {
        $(#[$doc])*
        #[derive(Debug)]
        pub struct $name {
            config: $config,
            core: Core,
        }

        impl $name {
            /// Validates `config`; nothing is called yet.
            pub fn new(config: $config) -> Result<Self, Error> {
                config.validate()?;
                let core = Core::new($kind, config.$destination.clone(), config.common());
                Ok($name { config, core })
            }

            #[doc = $spec]
            pub fn from_spec(spec: &str) -> Result<Self, Error> {
                Self::new($config::from_spec(spec)?)
            }

            /// Sends messages in `envelope`'s format. SQS and SNS have no
            /// CloudEvents binding: both CloudEvents formats send structured
            /// mode (one `application/cloudevents+json` body), as the
            /// stdout and file publishers do.
            pub fn with_envelope(mut self, envelope: Envelope) -> Self {
                self.core.envelope = envelope;
                self
            }

            /// The settings in use.
            pub fn config(&self) -> &$config {
                &self.config
            }
        }

        #[async_trait]
        impl Publisher for $name {
            fn name(&self) -> &str {
                $short
            }

            async fn publish(&self, batch: &[Event]) -> Result<Vec<Outcome>, Unavailable> {
                self.core.publish(batch).await
            }

            #[doc = $health]
            async fn health(&self) -> Result<(), Unavailable> {
                self.core.health().await
            }
        }
    };
}

aws_publisher! {
    /// Sends events to an Amazon SQS queue (`sqs://QUEUE_NAME` or `sqs://` +
    /// the queue URL).
    ///
    /// * body: the payload's JSON text as stored;
    /// * attributes (`String`): `outbox-event-id`, `outbox-event-type`,
    ///   `outbox-aggregate-type`, `outbox-aggregate-id`, then the producer's
    ///   headers; past the service's 10 attributes (or for a name or value it
    ///   does not accept) the rest go as one JSON object in `outbox-headers`;
    /// * FIFO queues (name ending in `.fifo`): `MessageGroupId` = the aggregate
    ///   id, `MessageDeduplicationId` = the event id;
    /// * with a CloudEvents [`Envelope`] ([`SqsPublisher::with_envelope`];
    ///   either CloudEvents format): the body is the structured-mode
    ///   CloudEvent, the attributes `content-type`
    ///   (`application/cloudevents+json`) and the producer's headers but
    ///   any named like a CloudEvents header (`ce-…`, `ce_…`).
    ///
    /// An event's topic override names another queue (name or URL). Nothing
    /// is called until the first publish or health check.
    SqsPublisher(SqsConfig, Kind::Sqs, queue, "sqs"),
    spec: "A publisher for `sqs://QUEUE_NAME` or `sqs://` + a queue URL, with default settings.",
    health: "`GetQueueUrl` (for a name) and `GetQueueAttributes`.",
}

aws_publisher! {
    /// Publishes events to an Amazon SNS topic (`sns://TOPIC_ARN`), as
    /// [`SqsPublisher`] does to a queue: the same body, attributes, group and
    /// de-duplication ids (FIFO topics end in `.fifo`). An event's topic
    /// override names another topic ARN.
    SnsPublisher(SnsConfig, Kind::Sns, topic_arn, "sns"),
    spec: "A publisher for `sns://TOPIC_ARN` with default settings.",
    health: "`GetTopicAttributes`.",
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{assert_unreachable_is_an_outage, free_port};

    fn msg(size: usize) -> Message {
        Message {
            body: "{}".into(),
            attributes: Vec::new(),
            group_id: None,
            dedup_id: None,
            size,
        }
    }

    #[test]
    fn calls_hold_ten_entries_and_the_size_limit() {
        let core = Core::new(
            Kind::Sqs,
            "q".into(),
            SqsConfig::from_spec("sqs://q").unwrap().common(),
        );
        let sizes: Vec<usize> = core
            .chunks((0..25).map(|i| (i, msg(100))).collect())
            .iter()
            .map(Vec::len)
            .collect();
        assert_eq!(sizes, [10, 10, 5]);
        let big = core.common.max_message_bytes / 2;
        let sizes: Vec<usize> = core
            .chunks((0..5).map(|i| (i, msg(big))).collect())
            .iter()
            .map(Vec::len)
            .collect();
        assert_eq!(sizes, [2, 2, 1]);
    }

    #[tokio::test]
    async fn an_unreachable_endpoint_is_an_outage() {
        let port = free_port();
        let p = SqsPublisher::new(SqsConfig {
            queue: format!("http://127.0.0.1:{port}/123456789012/q"),
            region: Some("us-east-1".into()),
            endpoint_url: Some(format!("http://127.0.0.1:{port}")),
            timeout_ms: 2_000,
            ..SqsConfig::default()
        })
        .unwrap();
        std::env::set_var("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE");
        std::env::set_var("AWS_SECRET_ACCESS_KEY", "hunter2-secret");
        assert_unreachable_is_an_outage(&p, "sqs queue q", &["hunter2"]).await;
    }
}
