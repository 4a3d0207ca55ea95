//! Settings of the RabbitMQ (AMQP 0-9-1) publisher.

use std::fmt;

use crate::broker::settings::{settings_debug, Settings};
use crate::{Error, Template};

use lapin::uri::AMQPUri;
use serde::{Deserialize, Serialize};

/// `url` with its password and secret parameters hidden, on one line:
/// the outbox's one redaction, re-exported for users of this crate.
pub use outbox::redact::redact_url;

/// The default exchange.
pub const DEFAULT_EXCHANGE: &str = "outbox";
/// The default routing-key template.
pub const DEFAULT_ROUTING_KEY_TEMPLATE: &str = "{event_type}";
/// RabbitMQ's own default `max_message_size` (128 MiB).
pub const DEFAULT_MAX_MESSAGE_BYTES: usize = 128 * 1024 * 1024;

/// The exchange's type, used when the publisher declares it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum ExchangeType {
    /// Routing keys matched against binding patterns (`order.*`, `#`).
    #[default]
    Topic,
    /// Routing keys matched exactly.
    Direct,
    /// Every bound queue gets every message.
    Fanout,
    /// Routed on header values.
    Headers,
}

/// What to do when the broker returns a message because no queue is bound
/// for its routing key (`basic.return`, 312 NO_ROUTE).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Unroutable {
    /// Retry with backoff (default): a missing binding is usually a consumer
    /// not deployed yet or an operator's slip; the event waits (blocking
    /// only its own aggregate) and is dead-lettered after the relay's
    /// `max_attempts` if nobody binds a queue.
    #[default]
    Retry,
    /// Dead-letter at once: for setups where an unroutable event is a bug.
    Reject,
    /// Publish without the `mandatory` flag: the broker drops unroutable
    /// messages and they count as delivered (fire-and-forget fan-out).
    Drop,
}

/// Settings of [`crate::amqp::AmqpPublisher`].
///
/// ```
/// use outbox_publishers::amqp::AmqpConfig;
/// let config = AmqpConfig::from_url("amqp://app:secret@127.0.0.1:5672/%2f").unwrap();
/// assert_eq!(config.exchange, "outbox");
/// assert!(!format!("{config:?}").contains("secret"));
/// ```
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AmqpConfig {
    /// Where to connect: `amqp://USER:PASS@HOST:PORT/VHOST` (`amqps://` for
    /// TLS; `%2f` is the default vhost `/`). The password is never shown in
    /// `Debug`, `Display` or errors.
    pub url: String,
    /// The exchange every event is published to. Default `outbox`.
    pub exchange: String,
    /// The exchange's type when the publisher declares it. Default `topic`.
    pub exchange_type: ExchangeType,
    /// Declare the exchange (durable) on connect if it does not exist. If it
    /// exists with other settings the publisher reports the broker's error
    /// as an outage. Default `true`.
    pub declare_exchange: bool,
    /// Routing key for an event without a topic override: a
    /// [`Template`]. Default `{event_type}`.
    pub routing_key_template: String,
    /// What to do with a message no queue is bound for. Default `retry`.
    pub unroutable: Unroutable,
    /// Largest message body, in bytes; a larger event is rejected before it
    /// is sent. Default 134217728, RabbitMQ's default `max_message_size`; a
    /// broker with a lower limit closes the channel instead, which the
    /// publisher also classifies as a rejection of that event.
    pub max_message_bytes: usize,
    /// How long sending a batch and receiving its publisher confirms may
    /// take. Keep it below the relay's `publish_timeout_ms`. Default 15000.
    pub confirm_timeout_ms: u64,
    /// How long connecting (TCP, TLS, AMQP handshake, channel setup) may
    /// take. Default 5000.
    pub connect_timeout_ms: u64,
    /// The connection name shown in RabbitMQ's management UI. Default
    /// `outbox-relay`.
    pub connection_name: String,
}

impl Default for AmqpConfig {
    fn default() -> Self {
        AmqpConfig {
            url: "amqp://guest:guest@127.0.0.1:5672/%2f".to_owned(),
            exchange: DEFAULT_EXCHANGE.to_owned(),
            exchange_type: ExchangeType::Topic,
            declare_exchange: true,
            routing_key_template: DEFAULT_ROUTING_KEY_TEMPLATE.to_owned(),
            unroutable: Unroutable::Retry,
            max_message_bytes: DEFAULT_MAX_MESSAGE_BYTES,
            confirm_timeout_ms: 15_000,
            connect_timeout_ms: 5_000,
            connection_name: "outbox-relay".to_owned(),
        }
    }
}

settings_debug!(AmqpConfig {
    url => redact_url, exchange, exchange_type, declare_exchange, routing_key_template,
    unroutable, max_message_bytes, confirm_timeout_ms, connect_timeout_ms, connection_name,
});

impl fmt::Display for AmqpConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} exchange {}", redact_url(&self.url), self.exchange)
    }
}

/// The checks of these settings, their errors naming `amqp`.
const AMQP: Settings = Settings::of("amqp");

impl AmqpConfig {
    /// Settings for `amqp://USER:PASS@HOST:PORT/VHOST`, every other field at
    /// its default.
    pub fn from_url(url: &str) -> Result<Self, Error> {
        let config = AmqpConfig {
            url: url.to_owned(),
            ..AmqpConfig::default()
        };
        config.validate()?;
        Ok(config)
    }

    /// The parsed URL.
    pub(crate) fn uri(&self) -> Result<AMQPUri, Error> {
        let shown = redact_url(&self.url);
        if !(self.url.starts_with("amqp://") || self.url.starts_with("amqps://")) {
            return Err(AMQP.invalid(
                "url",
                shown,
                "must start with amqp:// or amqps://, e.g. amqp://USER:PASS@HOST:5672/%2f",
            ));
        }
        let uri: AMQPUri = self.url.parse().map_err(|e: String| {
            AMQP.invalid(
                "url",
                &shown,
                format!(
                    "cannot be parsed ({}); use amqp://USER:PASS@HOST:PORT/VHOST",
                    outbox::redact::redact_text(&e.replace(&self.url, &shown))
                ),
            )
        })?;
        if uri.vhost.is_empty() {
            return Err(AMQP.invalid(
                "url",
                shown,
                "names an empty vhost: write %2f for the default vhost /, e.g. amqp://HOST:5672/%2f",
            ));
        }
        Ok(uri)
    }

    /// `routing_key_template`, parsed, or why it cannot make routing keys.
    pub(crate) fn destination_template(&self) -> Result<Template, Error> {
        let field = "routing_key_template";
        Template::setting("amqp", field, &self.routing_key_template, |key| {
            match key.len() {
                0..=255 => Ok(()),
                _ => Err("routing keys are at most 255 bytes".into()),
            }
        })
    }

    /// Checks every field; the error names the field, its value and the fix.
    pub fn validate(&self) -> Result<(), Error> {
        self.uri()?;
        if self.exchange.is_empty() || self.exchange.len() > 255 {
            return Err(AMQP.invalid(
                "exchange",
                format!("{:?}", self.exchange),
                "use a name of 1 to 255 bytes (the default exchange \"\" cannot route by topic)",
            ));
        }
        if self.exchange.starts_with("amq.") && self.declare_exchange {
            return Err(AMQP.invalid(
                "exchange",
                &self.exchange,
                "names starting with amq. are reserved: set declare_exchange = false to use a built-in exchange",
            ));
        }
        self.destination_template()?;
        AMQP.within(
            "max_message_bytes",
            self.max_message_bytes,
            1..=512 * 1024 * 1024,
            "use 1 to 536870912 (RabbitMQ's largest max_message_size)",
        )?;
        AMQP.publish_timeout(
            "confirm_timeout_ms",
            self.confirm_timeout_ms,
            100..=3_600_000,
        )?;
        AMQP.connect_timeout("connect_timeout_ms", self.connect_timeout_ms)?;
        if self.connection_name.len() > 255 {
            return Err(AMQP.invalid(
                "connection_name",
                &self.connection_name,
                "use at most 255 bytes",
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
