//! The SQS and SNS publishers: a call's events become messages, split into
//! `SendMessageBatch` / `PublishBatch` calls of up to 10 entries (and
//! `max_message_bytes` together), sent concurrently up to
//! `max_concurrent_calls`; an event is delivered when the service listed
//! its entry as successful.
//!
//! One core serves both services: they differ only in the call that sends
//! a batch, in how a destination is named and in the health check. The
//! clients and destinations are in `client.rs`, batching in `batch.rs`,
//! the message and its attributes in `message.rs`, what an error means in
//! `classify.rs`.

use async_trait::async_trait;
use futures::stream::{self, StreamExt};
use outbox::{Event, Outcome, Publisher, Unavailable};
use tokio::sync::OnceCell;

use super::batch::{chunks, send, Chunk};
use super::classify::{classify_call, with_hint, CallFailure};
use super::client::{locate, Kind, QueueUrls, Service, Target};
use super::config::{Common, SnsConfig, SqsConfig};
use super::message::message;
use crate::{Envelope, Error};

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
    urls: QueueUrls,
}

impl std::fmt::Debug for Core {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Core")
            .field("kind", &self.kind)
            .field("destination", &self.destination)
            .finish_non_exhaustive()
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
            urls: QueueUrls::default(),
        }
    }

    /// The client, made on first use (loading the SDK's configuration).
    async fn service(&self) -> Result<&Service, String> {
        self.service
            .get_or_try_init(|| Service::new(self.kind, &self.common))
            .await
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
            let target = match locate(service, destination, &self.urls).await {
                Ok(t) => t,
                Err(failure) => {
                    let outcome = failure.outcome();
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
            for chunk in chunks(entries, self.common.max_message_bytes) {
                calls.push((target.clone(), chunk));
            }
        }

        let settled: Vec<Vec<(usize, Outcome)>> = stream::iter(calls)
            .map(|(target, chunk)| async move { send(service, &target, chunk).await })
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
        let failed = |f: CallFailure| Unavailable::new(with_hint(f.into_text()));
        let target = locate(service, &self.destination, &self.urls)
            .await
            .map_err(failed)?;
        let context = |call: &str| format!("{} ({call})", target.shown);
        let checked = match service {
            Service::Sqs(client) => client
                .get_queue_attributes()
                .queue_url(&target.address)
                .attribute_names(aws_sdk_sqs::types::QueueAttributeName::QueueArn)
                .send()
                .await
                .map(|_| ())
                .map_err(|e| classify_call(&e, &context("GetQueueAttributes"))),
            Service::Sns(client) => client
                .get_topic_attributes()
                .topic_arn(&target.address)
                .send()
                .await
                .map(|_| ())
                .map_err(|e| classify_call(&e, &context("GetTopicAttributes"))),
        };
        checked.map_err(failed)
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
