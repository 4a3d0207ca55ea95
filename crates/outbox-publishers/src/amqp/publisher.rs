//! The RabbitMQ publisher: persistent messages on a confirm-mode channel;
//! an event is delivered when the broker confirms it.

use std::time::Duration;

use async_trait::async_trait;
use lapin::options::{BasicPublishOptions, ConfirmSelectOptions, ExchangeDeclareOptions};
use lapin::protocol::{AMQPErrorKind, AMQPSoftError};
use lapin::types::{AMQPValue, FieldTable, LongString, ShortString};
use lapin::uri::AMQPUri;
use lapin::{
    BasicProperties, Channel, Confirmation, Connection, ConnectionProperties, ExchangeKind,
};
use outbox::{Event, Outcome, Publisher, Unavailable};
use tokio::sync::Mutex;
use tokio::time::{timeout, timeout_at, Instant};

use super::config::{redact_url, AmqpConfig, AmqpConfigError, ExchangeType, Unroutable};

/// AMQP `delivery_mode` of a persistent message.
const PERSISTENT: u8 = 2;

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
/// Messages are published `mandatory` on a channel in confirm mode; an event
/// is [`Outcome::Delivered`] only after the broker's `basic.ack` (for a
/// durable queue, after the message is on disk). The connection is opened on
/// the first publish and again after it is lost. See `docs/publishers.md`
/// for how each failure is classified.
pub struct AmqpPublisher {
    config: AmqpConfig,
    uri: AMQPUri,
    link: Mutex<Option<Link>>,
}

struct Link {
    connection: Connection,
    channel: Channel,
}

impl Link {
    fn usable(&self) -> bool {
        self.connection.status().connected() && self.channel.status().connected()
    }
}

impl std::fmt::Debug for AmqpPublisher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AmqpPublisher")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

/// A failure while publishing, before classification.
enum Failure {
    /// The connection is gone (or never came): an outage.
    Transport(String),
    /// The broker closed the channel; the connection is fine.
    Channel(String),
}

impl AmqpPublisher {
    /// Validates `config`. Nothing is connected until the first publish or
    /// health check, so a broker that is down now is not an error here.
    pub fn new(config: AmqpConfig) -> Result<Self, AmqpConfigError> {
        config.validate()?;
        let uri = config.uri()?;
        Ok(AmqpPublisher {
            config,
            uri,
            link: Mutex::new(None),
        })
    }

    /// A publisher for `amqp://USER:PASS@HOST:PORT/VHOST` with default settings.
    pub fn from_url(url: &str) -> Result<Self, AmqpConfigError> {
        Self::new(AmqpConfig::from_url(url)?)
    }

    /// The settings in use.
    pub fn config(&self) -> &AmqpConfig {
        &self.config
    }

    fn where_(&self) -> String {
        redact_url(&self.config.url)
    }

    /// Removes the password from `text`, should a client error quote it
    /// (the already redacted URL in it is left alone).
    fn scrub(&self, text: String) -> String {
        let password = &self.uri.authority.userinfo.password;
        if password.is_empty() {
            return text;
        }
        let shown = self.where_();
        text.split(shown.as_str())
            .map(|part| part.replace(password.as_str(), "***"))
            .collect::<Vec<_>>()
            .join(&shown)
    }

    async fn connect(&self) -> Result<Link, String> {
        let wait = Duration::from_millis(self.config.connect_timeout_ms);
        let props = ConnectionProperties::default()
            .with_connection_name(self.config.connection_name.clone().into());
        let connection = match timeout(wait, Connection::connect_uri(self.uri.clone(), props)).await
        {
            Err(_) => {
                return Err(format!(
                    "connecting to rabbitmq at {} timed out after {} ms",
                    self.where_(),
                    wait.as_millis()
                ))
            }
            Ok(Err(e)) => {
                return Err(self.scrub(format!(
                    "cannot connect to rabbitmq at {}: {e}",
                    self.where_()
                )))
            }
            Ok(Ok(c)) => c,
        };
        let channel = match timeout(wait, self.open_channel(&connection)).await {
            Err(_) => Err(format!(
                "opening a channel on {} timed out after {} ms",
                self.where_(),
                wait.as_millis()
            )),
            Ok(r) => r,
        };
        match channel {
            Ok(channel) => Ok(Link {
                connection,
                channel,
            }),
            Err(e) => {
                let _ = timeout(wait, connection.close(200, "setup failed".into())).await;
                Err(e)
            }
        }
    }

    async fn open_channel(&self, connection: &Connection) -> Result<Channel, String> {
        let channel = connection
            .create_channel()
            .await
            .map_err(|e| self.scrub(format!("opening a channel on {}: {e}", self.where_())))?;
        channel
            .confirm_select(ConfirmSelectOptions::default())
            .await
            .map_err(|e| {
                self.scrub(format!(
                    "enabling publisher confirms on {}: {e}",
                    self.where_()
                ))
            })?;
        if self.config.declare_exchange {
            let kind = match self.config.exchange_type {
                ExchangeType::Topic => ExchangeKind::Topic,
                ExchangeType::Direct => ExchangeKind::Direct,
                ExchangeType::Fanout => ExchangeKind::Fanout,
                ExchangeType::Headers => ExchangeKind::Headers,
            };
            channel
                .exchange_declare(
                    self.config.exchange.as_str().into(),
                    kind,
                    ExchangeDeclareOptions {
                        durable: true,
                        ..ExchangeDeclareOptions::default()
                    },
                    FieldTable::default(),
                )
                .await
                .map_err(|e| {
                    self.scrub(format!(
                        "declaring exchange {:?} ({:?}, durable) on {}: {e}; if it exists with other settings, \
                         match them in the config or set declare_exchange = false",
                        self.config.exchange,
                        self.config.exchange_type,
                        self.where_()
                    ))
                })?;
        }
        Ok(channel)
    }

    /// The message for `event`, or why it can never be sent.
    fn message(&self, event: &Event) -> Result<(ShortString, BasicProperties), String> {
        let key = event.destination(&self.config.routing_key_template);
        let routing_key = ShortString::try_new(key.clone()).map_err(|_| {
            format!(
                "routing key {:?}… is {} bytes long; AMQP allows 255",
                key.chars().take(40).collect::<String>(),
                key.len()
            )
        })?;
        if event.payload.len() > self.config.max_message_bytes {
            return Err(format!(
                "message of {} bytes is larger than max_message_bytes ({})",
                event.payload.len(),
                self.config.max_message_bytes
            ));
        }
        let mut headers = FieldTable::default();
        for (name, value) in event.message_headers() {
            let name = ShortString::try_new(name.clone()).map_err(|_| {
                format!("header name {name:?} is longer than 255 bytes, which AMQP does not allow")
            })?;
            headers.insert(name, AMQPValue::LongString(LongString::from(value)));
        }
        let mut props = BasicProperties::default()
            .with_content_type("application/json".into())
            .with_delivery_mode(PERSISTENT)
            .with_message_id(event.id.to_string().into())
            .with_headers(headers);
        if let Ok(kind) = ShortString::try_new(event.event_type.clone()) {
            props = props.with_type(kind);
        }
        if let Ok(ts) = u64::try_from(event.created_at.timestamp()) {
            props = props.with_timestamp(ts);
        }
        Ok((routing_key, props))
    }

    fn confirmed(&self, confirmation: Confirmation, routing_key: &str) -> Outcome {
        match confirmation {
            Confirmation::Ack(None) => Outcome::Delivered,
            Confirmation::Ack(Some(returned)) | Confirmation::Nack(Some(returned)) => {
                let why = format!(
                    "rabbitmq returned the message as unroutable: no queue is bound to exchange {:?} for routing key {routing_key:?} ({} {})",
                    self.config.exchange, returned.reply_code, returned.reply_text
                );
                match self.config.unroutable {
                    Unroutable::Reject => Outcome::Rejected(why),
                    Unroutable::Retry | Unroutable::Drop => Outcome::Retry(why),
                }
            }
            Confirmation::Nack(None) => Outcome::Retry(format!(
                "rabbitmq refused the message (basic.nack) on exchange {:?}, routing key {routing_key:?}",
                self.config.exchange
            )),
            Confirmation::NotRequested => {
                Outcome::Retry("rabbitmq channel is not in confirm mode".to_owned())
            }
        }
    }

    /// Publishes `todo` (indexes into `batch`) on `channel` and waits for
    /// their confirms. Fills `outcomes`; stops at the first failure.
    async fn publish_on(
        &self,
        channel: &Channel,
        batch: &[Event],
        todo: &[(usize, ShortString, BasicProperties)],
        outcomes: &mut [Option<Outcome>],
        connection: &Connection,
    ) -> Result<(), Failure> {
        let options = BasicPublishOptions {
            mandatory: self.config.unroutable != Unroutable::Drop,
            ..BasicPublishOptions::default()
        };
        let mut confirms = Vec::with_capacity(todo.len());
        let mut failure = None;
        for (i, key, props) in todo {
            match channel
                .basic_publish(
                    self.config.exchange.as_str().into(),
                    key.clone(),
                    options,
                    batch[*i].payload.as_bytes(),
                    props.clone(),
                )
                .await
            {
                Ok(confirm) => confirms.push((*i, key.as_str(), confirm)),
                Err(e) => {
                    failure = Some(e);
                    break;
                }
            }
        }
        let deadline = Instant::now() + Duration::from_millis(self.config.confirm_timeout_ms);
        for (i, key, confirm) in confirms {
            match timeout_at(deadline, confirm).await {
                Err(_) => {
                    return Err(Failure::Transport(format!(
                        "rabbitmq at {} sent no publisher confirm within {} ms",
                        self.where_(),
                        self.config.confirm_timeout_ms
                    )))
                }
                Ok(Ok(confirmation)) => outcomes[i] = Some(self.confirmed(confirmation, key)),
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

/// Closes a connection that is being given up, if it still lives.
async fn close_quietly(link: Option<Link>) {
    if let Some(link) = link {
        if link.connection.status().connected() {
            let _ = timeout(
                Duration::from_millis(500),
                link.connection.close(200, "reconnecting".into()),
            )
            .await;
        }
    }
}

/// Sorts a publish failure: only a channel closed for the message's sake
/// (`PRECONDITION_FAILED`, e.g. above the broker's `max_message_size`), or
/// closed without a reason while the connection lives, is worth finding
/// the culprit for. A missing exchange (404), refused access (403) and the
/// like concern every message: they are outages, and the next connection
/// declares the exchange again.
fn classify(e: &lapin::Error, connected: bool, text: String) -> Failure {
    if !connected || e.is_io_error() || e.is_amqp_hard_error() {
        return Failure::Transport(text);
    }
    match e.kind() {
        lapin::ErrorKind::ProtocolError(amqp) => match amqp.kind() {
            AMQPErrorKind::Soft(AMQPSoftError::PRECONDITIONFAILED) => Failure::Channel(text),
            _ => Failure::Transport(text),
        },
        lapin::ErrorKind::InvalidChannelState(..) | lapin::ErrorKind::InvalidChannel(_) => {
            Failure::Channel(text)
        }
        _ => Failure::Transport(text),
    }
}

#[async_trait]
impl Publisher for AmqpPublisher {
    fn name(&self) -> &str {
        "amqp"
    }

    async fn publish(&self, batch: &[Event]) -> Result<Vec<Outcome>, Unavailable> {
        let mut guard = self.link.lock().await;
        if !guard.as_ref().is_some_and(Link::usable) {
            close_quietly(guard.take()).await;
            *guard = Some(self.connect().await.map_err(Unavailable::new)?);
        }
        let Some(link) = guard.as_mut() else {
            return Err(Unavailable::new("rabbitmq connection missing"));
        };

        let mut outcomes: Vec<Option<Outcome>> = vec![None; batch.len()];
        let mut todo = Vec::with_capacity(batch.len());
        for (i, event) in batch.iter().enumerate() {
            match self.message(event) {
                Ok((key, props)) => todo.push((i, key, props)),
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
                    .filter(|(i, _, _)| outcomes[*i].is_none())
                    .collect();
                let mut channel: Option<Channel> = None;
                for one in rest {
                    let ch = match channel.take() {
                        Some(ch) if ch.status().connected() => ch,
                        _ => match self.open_channel(&link.connection).await {
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
                    None => self.open_channel(&link.connection).await,
                };
                match fresh {
                    Ok(ch) => link.channel = ch,
                    Err(_) => close_quietly(guard.take()).await,
                }
            }
        }
        Ok(outcomes
            .into_iter()
            .map(|o| o.unwrap_or_else(|| Outcome::Retry("rabbitmq gave no confirm".to_owned())))
            .collect())
    }

    async fn health(&self) -> Result<(), Unavailable> {
        let mut guard = self.link.lock().await;
        if guard.as_ref().is_some_and(Link::usable) {
            return Ok(());
        }
        *guard = Some(self.connect().await.map_err(Unavailable::new)?);
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

    #[tokio::test]
    async fn unreachable_broker_is_an_outage_and_hides_the_password() {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let p = AmqpPublisher::from_url(&format!("amqp://u:hunter2@127.0.0.1:{port}/%2f")).unwrap();
        let event = Event {
            id: uuid::Uuid::now_v7(),
            seq: 1,
            aggregate_type: "order".into(),
            aggregate_id: "1".into(),
            event_type: "order.created".into(),
            payload: "{}".into(),
            headers: Default::default(),
            topic: None,
            attempts: 0,
            created_at: chrono::Utc::now(),
            partition: 0,
        };
        let e = p.publish(&[event]).await.unwrap_err();
        assert!(e.message.contains(&port.to_string()), "{e}");
        assert!(!e.message.contains("hunter2"), "{e}");
        assert!(p.health().await.is_err());
        assert!(!format!("{p:?}").contains("hunter2"));
    }
}

/// After a lost connection: confirmed events stay delivered and the rest are
/// [`Outcome::Unavailable`]; with nothing confirmed the whole batch is an
/// outage.
fn partial_outage(
    outcomes: Vec<Option<Outcome>>,
    message: String,
) -> Result<Vec<Outcome>, Unavailable> {
    if !outcomes.iter().any(|o| o == &Some(Outcome::Delivered)) {
        return Err(Unavailable::new(message));
    }
    Ok(outcomes
        .into_iter()
        .map(|o| o.unwrap_or_else(|| Outcome::Unavailable(message.clone())))
        .collect())
}
