//! The RabbitMQ publisher: persistent messages on a confirm-mode channel;
//! an event is delivered when the broker confirms it.

use std::borrow::Cow;
use std::time::Duration;

use async_trait::async_trait;
use lapin::options::BasicPublishOptions;
use lapin::types::ShortString;
use lapin::uri::AMQPUri;
use lapin::{BasicProperties, Channel, Connection};
use outbox::{Event, Outcome, Publisher, Unavailable};
use tokio::sync::Mutex;
use tokio::time::{timeout, timeout_at, Instant};

use super::classify::{classify, confirmed, Failure};
use super::config::{AmqpConfig, Unroutable};
use super::connection::{close_quietly, Dialer, Link};
use crate::broker::publisher::{broker_publisher, or_retry, partial_outage};
use crate::{Envelope, Error, Template};

/// An event ready to send: its index in the batch, routing key,
/// properties, and body when it is not the payload itself.
type Prepared = (usize, ShortString, BasicProperties, Option<Vec<u8>>);

/// Publishes events to a RabbitMQ exchange.
///
/// * exchange: [`AmqpConfig::exchange`] (declared durable if missing);
/// * routing key: the event's topic override, or
///   [`AmqpConfig::routing_key_template`];
/// * properties: `message_id` = event id, `type` = event type,
///   `content_type` = `application/json`, `delivery_mode` = 2 (persistent),
///   `timestamp` = the event's `created_at`;
/// * headers: `outbox-event-id`, `outbox-event-type`,
///   `outbox-aggregate-type`, `outbox-aggregate-id`, then the producer's own
///   (`traceparent`, …);
/// * body: the payload's JSON bytes.
///
/// With a CloudEvents [`Envelope`] ([`AmqpPublisher::with_envelope`]) the
/// message follows the AMQP protocol binding: in binary mode
/// `cloudEvents:*` headers (application properties) replace the
/// `outbox-*` headers and `content_type` is the `datacontenttype`; in
/// structured mode the body is the CloudEvent and `content_type` is
/// `application/cloudevents+json`. The producer's headers follow (but for
/// ones named `cloudEvents:…`).
///
/// Messages are published `mandatory` on a channel in confirm mode; an event
/// is [`Outcome::Delivered`] only after the broker's `basic.ack` (for a
/// durable queue, after the message is on disk). The connection is opened on
/// the first publish and again after it is lost. See `docs/publishers.md`
/// for how each failure is classified.
pub struct AmqpPublisher {
    pub(super) config: AmqpConfig,
    pub(super) routing_key: Template,
    pub(super) uri: AMQPUri,
    pub(super) envelope: Envelope,
    link: Mutex<Option<Link>>,
}

broker_publisher!(AmqpPublisher(AmqpConfig) {
    /// Messages follow `envelope` (plain by default).
    fn with_envelope;
    /// A publisher for `amqp://USER:PASS@HOST:PORT/VHOST` with default settings.
    fn from_url;
});

impl AmqpPublisher {
    /// Validates `config`. Nothing is connected until the first publish or
    /// health check, so a broker that is down now is not an error here.
    pub fn new(config: AmqpConfig) -> Result<Self, Error> {
        config.validate()?;
        let uri = config.uri()?;
        let routing_key = config.destination_template()?;
        Ok(AmqpPublisher {
            config,
            routing_key,
            uri,
            envelope: Envelope::plain(),
            link: Mutex::new(None),
        })
    }

    pub(super) fn where_(&self) -> String {
        self.dialer().where_()
    }

    /// Removes the password from `text`, should a client error quote it
    /// (the already redacted URL in it is left alone).
    pub(super) fn scrub(&self, text: String) -> String {
        self.dialer().scrub(text)
    }

    /// Opens links to the broker this publisher sends to.
    fn dialer(&self) -> Dialer<'_> {
        Dialer {
            config: &self.config,
            uri: &self.uri,
        }
    }

    /// A new confirm-mode channel after the broker closed one. lapin can
    /// hand out the id of a channel whose close is still being settled, and
    /// such a channel is unusable at once (`invalid channel state`); a fresh
    /// connection is then opened in place of `link`'s.
    async fn renew_channel(&self, link: &mut Link) -> Result<Channel, String> {
        match self.dialer().open_channel(&link.connection).await {
            Ok(ch) => Ok(ch),
            Err(e) => {
                tracing::debug!(error = %e, "no new channel on this connection; reconnecting");
                let fresh = self.dialer().connect().await?;
                let channel = fresh.channel.clone();
                close_quietly(Some(std::mem::replace(link, fresh))).await;
                Ok(channel)
            }
        }
    }

    /// Publishes `todo` (indexes into `batch`) on `channel` and waits for
    /// their confirms. Fills `outcomes`; stops at the first failure.
    async fn publish_on(
        &self,
        channel: &Channel,
        batch: &[Event],
        todo: &[Prepared],
        outcomes: &mut [Option<Outcome>],
        connection: &Connection,
    ) -> Result<(), Failure> {
        let options = BasicPublishOptions {
            mandatory: self.config.unroutable != Unroutable::Drop,
            ..BasicPublishOptions::default()
        };
        // One deadline for sending and confirming: a connection that stops
        // taking frames without being reported closed is given up like one
        // that sends no confirms, and the next publish reconnects.
        let deadline = Instant::now() + Duration::from_millis(self.config.confirm_timeout_ms);
        let stalled = |what: &str| {
            Failure::Transport(format!(
                "rabbitmq at {} {what} within {} ms",
                self.where_(),
                self.config.confirm_timeout_ms
            ))
        };
        let mut confirms = Vec::with_capacity(todo.len());
        let mut failure = None;
        for (i, key, props, body) in todo {
            let body = body.as_deref().unwrap_or(batch[*i].payload.as_bytes());
            let sent = channel.basic_publish(
                self.config.exchange.as_str().into(),
                key.clone(),
                options,
                body,
                props.clone(),
            );
            match timeout_at(deadline, sent).await {
                Err(_) => return Err(stalled("took no messages")),
                Ok(Ok(confirm)) => confirms.push((*i, key.as_str(), confirm)),
                Ok(Err(e)) => {
                    failure = Some(e);
                    break;
                }
            }
        }
        for (i, key, confirm) in confirms {
            match timeout_at(deadline, confirm).await {
                Err(_) => return Err(stalled("sent no publisher confirm")),
                Ok(Ok(confirmation)) => {
                    outcomes[i] = Some(confirmed(&self.config, confirmation, key))
                }
                Ok(Err(e)) => {
                    // The broker's reason for closing the channel beats the
                    // "channel closed" errors that follow from it.
                    if failure
                        .as_ref()
                        .is_none_or(|f: &lapin::Error| !f.is_amqp_error())
                    {
                        failure = Some(e);
                    }
                }
            }
        }
        match failure {
            None => Ok(()),
            Some(e) => {
                let text = self.scrub(format!("rabbitmq at {}: {e}", self.where_()));
                Err(classify(&e, connection.status().connected(), text))
            }
        }
    }
}

#[async_trait]
impl Publisher for AmqpPublisher {
    fn name(&self) -> &str {
        "amqp"
    }

    fn destination(&self, event: &Event) -> Option<String> {
        // The exchange is the destination; the default exchange ("")
        // routes by the routing key, which then names the queue.
        if self.config.exchange.is_empty() {
            self.routing_key
                .destination(event)
                .ok()
                .map(Cow::into_owned)
        } else {
            Some(self.config.exchange.clone())
        }
    }

    async fn publish(&self, batch: &[Event]) -> Result<Vec<Outcome>, Unavailable> {
        let mut guard = self.link.lock().await;
        if !guard.as_ref().is_some_and(Link::usable) {
            close_quietly(guard.take()).await;
            *guard = Some(self.dialer().connect().await.map_err(Unavailable::new)?);
        }
        let Some(link) = guard.as_mut() else {
            return Err(Unavailable::new("rabbitmq connection missing"));
        };

        let mut outcomes: Vec<Option<Outcome>> = vec![None; batch.len()];
        let mut todo = Vec::with_capacity(batch.len());
        for (i, event) in batch.iter().enumerate() {
            match self.message(event) {
                Ok((key, props, body)) => todo.push((i, key, props, body)),
                Err(why) => outcomes[i] = Some(Outcome::Rejected(why)),
            }
        }

        match self
            .publish_on(&link.channel, batch, &todo, &mut outcomes, &link.connection)
            .await
        {
            Ok(()) => {}
            Err(Failure::Transport(message)) => {
                // The connection is gone: what was confirmed stays
                // delivered; the rest is sent again on a new connection,
                // with no attempt counted.
                close_quietly(guard.take()).await;
                return partial_outage(outcomes, message);
            }
            Err(Failure::Channel(first)) => {
                // The broker closed the channel (for example a message
                // above its max_message_size). Find the culprit: send the
                // unconfirmed events one at a time, each on a fresh channel
                // after a failure.
                tracing::warn!(error = %first, "rabbitmq closed the channel; publishing the rest of the batch one by one");
                let rest: Vec<_> = todo
                    .into_iter()
                    .filter(|(i, ..)| outcomes[*i].is_none())
                    .collect();
                let mut channel: Option<Channel> = None;
                for one in rest {
                    let ch = match channel.take() {
                        Some(ch) if ch.status().connected() => ch,
                        _ => match self.renew_channel(link).await {
                            Ok(ch) => ch,
                            Err(e) => {
                                close_quietly(guard.take()).await;
                                return Err(Unavailable::new(e));
                            }
                        },
                    };
                    let i = one.0;
                    match self
                        .publish_on(
                            &ch,
                            batch,
                            std::slice::from_ref(&one),
                            &mut outcomes,
                            &link.connection,
                        )
                        .await
                    {
                        Ok(()) => channel = Some(ch),
                        Err(Failure::Channel(why)) => {
                            outcomes[i] = Some(Outcome::Rejected(format!(
                                "rabbitmq refused this message and closed the channel: {why}"
                            )));
                        }
                        Err(Failure::Transport(message)) => {
                            close_quietly(guard.take()).await;
                            return partial_outage(outcomes, message);
                        }
                    }
                }
                let fresh = match channel {
                    Some(ch) => Ok(ch),
                    None => self.renew_channel(link).await,
                };
                match fresh {
                    Ok(ch) => link.channel = ch,
                    Err(_) => close_quietly(guard.take()).await,
                }
            }
        }
        Ok(or_retry(outcomes, "rabbitmq gave no confirm"))
    }

    async fn health(&self) -> Result<(), Unavailable> {
        let mut guard = self.link.lock().await;
        if guard.as_ref().is_some_and(Link::usable) {
            return Ok(());
        }
        *guard = Some(self.dialer().connect().await.map_err(Unavailable::new)?);
        Ok(())
    }

    async fn close(&self) {
        if let Some(link) = self.link.lock().await.take() {
            let wait = Duration::from_millis(self.config.connect_timeout_ms);
            let _ = timeout(wait, link.channel.close(200, "relay stopping".into())).await;
            let _ = timeout(wait, link.connection.close(200, "relay stopping".into())).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{assert_unreachable_is_an_outage, free_port};

    #[tokio::test]
    async fn unreachable_broker_is_an_outage_and_hides_the_password() {
        let port = free_port();
        let p = AmqpPublisher::from_url(&format!("amqp://u:hunter2@127.0.0.1:{port}/%2f")).unwrap();
        assert_unreachable_is_an_outage(&p, &port.to_string(), &["hunter2"]).await;
    }
}
