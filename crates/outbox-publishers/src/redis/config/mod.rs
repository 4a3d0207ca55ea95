//! Settings of the Redis Streams publisher.

use std::fmt;

use outbox::redact::redact_url;
use serde::{Deserialize, Serialize};

use crate::broker::settings::{settings_debug, Settings};
use crate::{Error, Template};

/// The default stream-key template.
pub const DEFAULT_STREAM: &str = "outbox:{aggregate_type}";

/// Redis's own limit on one value (`proto-max-bulk-len`, 512 MiB).
pub const DEFAULT_MAX_MESSAGE_BYTES: usize = 512 * 1024 * 1024;

/// Settings of [`crate::redis::RedisPublisher`].
///
/// ```
/// use outbox_publishers::redis::RedisConfig;
/// let config = RedisConfig::from_url("redis://app:secret@127.0.0.1:6379/2").unwrap();
/// assert_eq!(config.stream, "outbox:{aggregate_type}");
/// assert!(!format!("{config:?} {config}").contains("secret"));
/// ```
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RedisConfig {
    /// Where to connect: `redis://[USER:PASS@]HOST:PORT[/DB]` (the port
    /// defaults to 6379, the database to 0). The password is never shown.
    pub url: String,
    /// Stream key of an event without a topic override: a [`Template`].
    /// Default `outbox:{aggregate_type}`.
    pub stream: String,
    /// Trim each stream to about this many entries as events are added
    /// (`XADD … MAXLEN ~ N`; Redis trims whole nodes, so a stream may hold
    /// a few more). Unset (the default): streams are not trimmed.
    pub maxlen: Option<u64>,
    /// After each batch, wait until this many replicas have its writes
    /// (`WAIT`); fewer within [`RedisConfig::wait_timeout_ms`] is an
    /// outage. Unset (the default): the primary's answer is enough.
    pub wait_replicas: Option<u32>,
    /// How long `WAIT` may take. Default 1000.
    pub wait_timeout_ms: u64,
    /// Largest entry, in bytes (field names and values together); a larger
    /// event is rejected before it is sent. Default 536870912, Redis's own
    /// limit on a value.
    pub max_message_bytes: usize,
    /// How long Redis may take to answer a batch (or a `WAIT`). Keep it
    /// below the relay's `publish_timeout_ms`. Default 10000.
    pub response_timeout_ms: u64,
    /// How long connecting (TCP, authentication, database selection) may
    /// take. Default 5000.
    pub connect_timeout_ms: u64,
}

impl Default for RedisConfig {
    fn default() -> Self {
        RedisConfig {
            url: "redis://127.0.0.1:6379".to_owned(),
            stream: DEFAULT_STREAM.to_owned(),
            maxlen: None,
            wait_replicas: None,
            wait_timeout_ms: 1_000,
            max_message_bytes: DEFAULT_MAX_MESSAGE_BYTES,
            response_timeout_ms: 10_000,
            connect_timeout_ms: 5_000,
        }
    }
}

settings_debug!(RedisConfig {
    url => redact_url, stream, maxlen, wait_replicas, wait_timeout_ms, max_message_bytes,
    response_timeout_ms, connect_timeout_ms,
});

impl fmt::Display for RedisConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} stream {}", redact_url(&self.url), self.stream)
    }
}

/// The checks of these settings, their errors naming `redis`.
const REDIS: Settings = Settings::of("redis");

impl RedisConfig {
    /// Settings for `redis://[USER:PASS@]HOST:PORT[/DB]`, every other field
    /// at its default.
    pub fn from_url(url: &str) -> Result<Self, Error> {
        let config = RedisConfig {
            url: url.to_owned(),
            ..RedisConfig::default()
        };
        config.validate()?;
        Ok(config)
    }

    /// The client for [`RedisConfig::url`] (nothing is connected).
    pub(crate) fn client(&self) -> Result<redis::Client, Error> {
        let shown = redact_url(&self.url);
        let form = "use redis://HOST:PORT[/DB] (with a login, redis://USER:PASS@HOST:PORT/DB), \
                    e.g. redis://127.0.0.1:6379/0";
        if self.url.starts_with("rediss://") {
            return Err(REDIS.invalid(
                "url",
                shown,
                format!("TLS (rediss://) is not supported by this publisher; {form}"),
            ));
        }
        let Some(rest) = self.url.strip_prefix("redis://") else {
            return Err(REDIS.invalid("url", shown, format!("must start with redis://; {form}")));
        };
        let host = rest.rsplit_once('@').map_or(rest, |(_, h)| h);
        if host.is_empty() || host.starts_with([':', '/']) {
            return Err(REDIS.invalid("url", shown, format!("names no host; {form}")));
        }
        if rest.contains(['?', '#']) {
            return Err(REDIS.invalid(
                "url",
                shown,
                format!("takes no query or fragment; {form}; set other options in the config file"),
            ));
        }
        if let Some((_, db)) = host.split_once('/') {
            if !db.is_empty() && !db.parse::<u32>().is_ok_and(|n| n <= 1_000_000) {
                return Err(REDIS.invalid(
                    "url",
                    shown,
                    format!(
                        "the database after / is a number (0 to 15 on a default server); {form}"
                    ),
                ));
            }
        }
        let authority = host.split('/').next().unwrap_or_default();
        let port = if authority.starts_with('[') {
            authority.split_once("]:").map(|(_, p)| p)
        } else {
            authority.rsplit_once(':').map(|(_, p)| p)
        };
        if port.is_some_and(|p| !p.parse::<u16>().is_ok_and(|p| p > 0)) {
            return Err(REDIS.invalid(
                "url",
                shown,
                format!("the port is a number from 1 to 65535; {form}"),
            ));
        }
        redis::Client::open(self.url.as_str()).map_err(|e| {
            let why = outbox::redact::redact_text(&e.to_string().replace(&self.url, &shown));
            REDIS.invalid("url", &shown, format!("cannot be parsed ({why}); {form}"))
        })
    }

    /// `stream`, parsed, or why it cannot name streams.
    pub(crate) fn destination_template(&self) -> Result<Template, Error> {
        Template::setting("redis", "stream", &self.stream, |key| match key {
            "" => Err("name the stream key, e.g. outbox:{aggregate_type}".into()),
            _ => Ok(()),
        })
    }

    /// Checks every field; the error names the field, its value and the fix.
    pub fn validate(&self) -> Result<(), Error> {
        self.client()?;
        self.destination_template()?;
        // An unset limit means none; zero is not a limit but a slip.
        let zeros = [
            (
                "maxlen",
                self.maxlen == Some(0),
                "use at least 1, or leave it unset to keep every entry",
            ),
            (
                "wait_replicas",
                self.wait_replicas == Some(0),
                "use at least 1, or leave it unset not to wait for replicas",
            ),
        ];
        if let Some((field, _, fix)) = zeros.into_iter().find(|(_, zero, _)| *zero) {
            return Err(REDIS.invalid(field, 0, fix));
        }
        REDIS.within(
            "wait_timeout_ms",
            self.wait_timeout_ms,
            1..=600_000,
            "use 1 to 600000 (WAIT with 0 would block forever)",
        )?;
        REDIS.within(
            "max_message_bytes",
            self.max_message_bytes,
            1..=DEFAULT_MAX_MESSAGE_BYTES,
            "use 1 to 536870912 (Redis's proto-max-bulk-len)",
        )?;
        REDIS.publish_timeout(
            "response_timeout_ms",
            self.response_timeout_ms,
            100..=3_600_000,
        )?;
        if self.wait_replicas.is_some() && self.wait_timeout_ms >= self.response_timeout_ms {
            return Err(REDIS.invalid(
                "wait_timeout_ms",
                self.wait_timeout_ms,
                format!(
                    "keep it below response_timeout_ms ({}), which also bounds the WAIT",
                    self.response_timeout_ms
                ),
            ));
        }
        REDIS.connect_timeout("connect_timeout_ms", self.connect_timeout_ms)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests;
