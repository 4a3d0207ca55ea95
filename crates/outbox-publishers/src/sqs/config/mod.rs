//! Settings of the SQS and SNS publishers, and the forms of their specs
//! (`sqs://QUEUE_NAME`, `sqs://https://…/QUEUE_NAME`, `sns://TOPIC_ARN`).

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::broker::settings::Settings;
use crate::Error;

/// SQS's and SNS's limit on one message, in bytes (body and attributes), and
/// on all the messages of one batch call together: 256 KiB.
pub const DEFAULT_MAX_MESSAGE_BYTES: usize = 256 * 1024;

/// The most entries one `SendMessageBatch` / `PublishBatch` call takes.
pub const MAX_BATCH_ENTRIES: usize = 10;

/// The largest message the services take at all (1 MiB, on queues and
/// topics configured for it).
const MAX_MESSAGE_BYTES_CEILING: usize = 1024 * 1024;

/// The checks of the SQS publisher's settings, their errors naming `sqs`.
const SQS: Settings = Settings::of("sqs");
/// The checks of the SNS publisher's settings, their errors naming `sns`.
const SNS: Settings = Settings::of("sns");

/// Settings of [`crate::sqs::SqsPublisher`] (`[publisher.sqs]`).
///
/// Credentials are not settings: they come from the AWS SDK's standard
/// chain (`AWS_ACCESS_KEY_ID`/`AWS_SECRET_ACCESS_KEY`, `AWS_PROFILE` and the
/// shared files, web identity, ECS and EC2 roles).
///
/// ```
/// use outbox_publishers::sqs::SqsConfig;
/// let c = SqsConfig::from_spec("sqs://orders.fifo").unwrap();
/// assert_eq!((c.queue.as_str(), c.is_fifo()), ("orders.fifo", true));
/// let c = SqsConfig::from_spec("sqs://https://sqs.eu-west-1.amazonaws.com/123456789012/orders").unwrap();
/// assert_eq!((c.queue_name(), c.is_fifo()), ("orders", false));
/// assert!(SqsConfig::from_spec("sqs://orders?x").is_err());
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SqsConfig {
    /// The queue: its name (resolved once with `GetQueueUrl`) or its URL.
    /// A name ending in `.fifo` is a FIFO queue. Set by the spec.
    pub queue: String,
    /// The region; unset (the default): the SDK's chain (`AWS_REGION`,
    /// the profile), else the region of the queue URL.
    pub region: Option<String>,
    /// Another endpoint (a local stand-in); unset (the default): the SDK's
    /// (`AWS_ENDPOINT_URL_SQS`, `AWS_ENDPOINT_URL`, else AWS's own).
    pub endpoint_url: Option<String>,
    /// Largest message, in bytes (body and attributes), and largest batch
    /// call; a larger event is rejected before it is sent. Default 262144
    /// (256 KiB, the service's default limit).
    pub max_message_bytes: usize,
    /// How many SQS/SNS batch calls of one publish call may be in flight at once. Default 8.
    pub max_concurrent_calls: usize,
    /// How long one call may take, connecting included. Keep it below the
    /// relay's `publish_timeout_ms`. Default 10000.
    pub timeout_ms: u64,
    /// How long connecting may take. Default 3000.
    pub connect_timeout_ms: u64,
}

impl Default for SqsConfig {
    fn default() -> Self {
        SqsConfig {
            queue: String::new(),
            region: None,
            endpoint_url: None,
            max_message_bytes: DEFAULT_MAX_MESSAGE_BYTES,
            max_concurrent_calls: 8,
            timeout_ms: 10_000,
            connect_timeout_ms: 3_000,
        }
    }
}

impl fmt::Display for SqsConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "sqs queue {}", self.queue)
    }
}

/// Settings of [`crate::sqs::SnsPublisher`] (`[publisher.sns]`); the same
/// as [`SqsConfig`] but for a topic.
///
/// The client settings repeat [`SqsConfig`]'s on purpose: both tables are
/// `deny_unknown_fields`, which serde cannot keep across a
/// `#[serde(flatten)]`ed shared struct, and a misspelt key must stay an
/// error naming it.
///
/// ```
/// use outbox_publishers::sqs::SnsConfig;
/// let c = SnsConfig::from_spec("sns://arn:aws:sns:us-east-1:123456789012:orders.fifo").unwrap();
/// assert!(c.is_fifo());
/// assert!(SnsConfig::from_spec("sns://orders").is_err());
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SnsConfig {
    /// The topic's ARN, `arn:aws:sns:REGION:ACCOUNT:NAME`; a name ending in
    /// `.fifo` is a FIFO topic. Set by the spec.
    pub topic_arn: String,
    /// The region; unset (the default): the SDK's chain, else the ARN's.
    pub region: Option<String>,
    /// Another endpoint (a local stand-in); unset (the default): the SDK's
    /// (`AWS_ENDPOINT_URL_SNS`, `AWS_ENDPOINT_URL`, else AWS's own).
    pub endpoint_url: Option<String>,
    /// As [`SqsConfig::max_message_bytes`]. Default 262144.
    pub max_message_bytes: usize,
    /// As [`SqsConfig::max_concurrent_calls`]. Default 8.
    pub max_concurrent_calls: usize,
    /// As [`SqsConfig::timeout_ms`]. Default 10000.
    pub timeout_ms: u64,
    /// As [`SqsConfig::connect_timeout_ms`]. Default 3000.
    pub connect_timeout_ms: u64,
}

impl Default for SnsConfig {
    fn default() -> Self {
        let s = SqsConfig::default();
        SnsConfig {
            topic_arn: String::new(),
            region: None,
            endpoint_url: None,
            max_message_bytes: s.max_message_bytes,
            max_concurrent_calls: s.max_concurrent_calls,
            timeout_ms: s.timeout_ms,
            connect_timeout_ms: s.connect_timeout_ms,
        }
    }
}

impl fmt::Display for SnsConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "sns topic {}", self.topic_arn)
    }
}

/// The settings both publishers share, as the client needs them.
#[derive(Debug, Clone)]
pub(super) struct Common {
    pub(super) region: Option<String>,
    pub(super) fallback_region: Option<String>,
    pub(super) endpoint_url: Option<String>,
    pub(super) max_message_bytes: usize,
    pub(super) max_concurrent_calls: usize,
    pub(super) timeout_ms: u64,
    pub(super) connect_timeout_ms: u64,
}

/// Whether `name` is a valid queue name (`[A-Za-z0-9_-]`, 1 to 80
/// characters, `.fifo` included).
pub(super) fn valid_queue_name(name: &str) -> bool {
    let base = name.strip_suffix(".fifo").unwrap_or(name);
    !base.is_empty()
        && name.len() <= 80
        && base
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// The queue name of a queue URL (its last path segment), if it is one.
pub(super) fn queue_url_name(url: &str) -> Option<&str> {
    let rest = url
        .strip_prefix("https://")
        .or_else(|| url.strip_prefix("http://"))?;
    let (host, path) = rest.split_once('/')?;
    if host.is_empty() || rest.contains(['?', '#', ' ']) {
        return None;
    }
    let mut parts = path.split('/');
    let (account, name) = (parts.next()?, parts.next()?);
    if parts.next().is_some() || account.is_empty() || !valid_queue_name(name) {
        return None;
    }
    Some(name)
}

/// The region in an SQS URL's host (`sqs.REGION.amazonaws.com`).
fn url_region(url: &str) -> Option<String> {
    let host = url.split('/').nth(2)?;
    let mut labels = host.split('.');
    match (labels.next(), labels.next()) {
        (Some("sqs"), Some(region)) if region.contains('-') => Some(region.to_owned()),
        _ => None,
    }
}

/// The parts of a topic ARN: (region, name), if it is one.
pub(super) fn topic_arn_parts(arn: &str) -> Option<(&str, &str)> {
    let parts: Vec<&str> = arn.split(':').collect();
    let ["arn", partition, "sns", region, account, name] = parts.as_slice() else {
        return None;
    };
    let base = name.strip_suffix(".fifo").unwrap_or(name);
    let name_ok = !base.is_empty()
        && name.len() <= 256
        && base
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    (!partition.is_empty() && !region.is_empty() && !account.is_empty() && name_ok)
        .then_some((*region, *name))
}

const SQS_FORM: &str = "use sqs://QUEUE_NAME (letters, digits, - and _, up to 80 characters, \
                        ending in .fifo for a FIFO queue) or sqs:// and the queue URL, \
                        e.g. sqs://orders.fifo";
const SNS_FORM: &str =
    "use sns://TOPIC_ARN, e.g. sns://arn:aws:sns:us-east-1:123456789012:orders.fifo";

/// `value` quoted, cut to 100 characters.
fn shown(value: &str) -> String {
    format!("{:?}", outbox::redact::shorten(value, 100))
}

/// `Common` from the fields of `$config`, an [`SqsConfig`] or an
/// [`SnsConfig`], which share them; the region falls back to
/// `$fallback_region`.
macro_rules! common {
    ($config:expr, $fallback_region:expr) => {
        Common {
            region: $config.region.clone(),
            fallback_region: $fallback_region,
            endpoint_url: $config.endpoint_url.clone(),
            max_message_bytes: $config.max_message_bytes,
            max_concurrent_calls: $config.max_concurrent_calls,
            timeout_ms: $config.timeout_ms,
            connect_timeout_ms: $config.connect_timeout_ms,
        }
    };
}

impl Common {
    /// Checks the shared fields of one publisher's settings.
    fn check(&self, settings: Settings) -> Result<(), Error> {
        if let Some(r) = &self.region {
            let ok = !r.is_empty()
                && r.len() <= 64
                && r.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
            if !ok {
                return Err(settings.invalid(
                    "region",
                    shown(r),
                    "name an AWS region, e.g. us-east-1, or leave it unset to use AWS_REGION",
                ));
            }
        }
        if let Some(e) = &self.endpoint_url {
            let ok = (e.starts_with("http://") || e.starts_with("https://"))
                && e.len() > "https://".len()
                && !e.contains([' ', '@', '?', '#']);
            if !ok {
                return Err(settings.invalid(
                    "endpoint_url",
                    shown(&outbox::redact::redact_url(e)),
                    "use http[s]://HOST[:PORT] without a login, or leave it unset",
                ));
            }
        }
        settings.within(
            "max_message_bytes",
            self.max_message_bytes,
            1_024..=MAX_MESSAGE_BYTES_CEILING,
            "use 1024 to 1048576 (the service's limit is 262144 unless raised)",
        )?;
        settings.within(
            "max_concurrent_calls",
            self.max_concurrent_calls,
            1..=64,
            "use 1 to 64",
        )?;
        settings.publish_timeout("timeout_ms", self.timeout_ms, 100..=600_000)?;
        settings.connect_timeout("connect_timeout_ms", self.connect_timeout_ms)
    }
}

impl SqsConfig {
    /// Settings for `sqs://QUEUE_NAME` or `sqs://` + a queue URL, every
    /// other field at its default.
    pub fn from_spec(spec: &str) -> Result<Self, Error> {
        let mut config = SqsConfig::default();
        config.apply_spec(spec)?;
        Ok(config)
    }

    /// Takes the queue from `spec` (`sqs://QUEUE_NAME` or `sqs://` + a
    /// queue URL) and checks every field.
    pub fn apply_spec(&mut self, spec: &str) -> Result<(), Error> {
        let Some(queue) = spec.strip_prefix("sqs://") else {
            return Err(SQS.invalid("queue", shown(spec), SQS_FORM));
        };
        self.queue = queue.to_owned();
        self.validate()
    }

    /// Checks every field; the error names the field, its value and the fix.
    pub fn validate(&self) -> Result<(), Error> {
        let q = &self.queue;
        let ok = if q.contains("://") {
            queue_url_name(q).is_some()
        } else {
            valid_queue_name(q)
        };
        if !ok {
            return Err(SQS.invalid("queue", shown(q), SQS_FORM));
        }
        self.common().check(SQS)
    }

    /// The queue's name (the last segment of a URL).
    pub fn queue_name(&self) -> &str {
        queue_url_name(&self.queue).unwrap_or(&self.queue)
    }

    /// Whether the queue is a FIFO queue (its name ends in `.fifo`).
    pub fn is_fifo(&self) -> bool {
        self.queue_name().ends_with(".fifo")
    }

    pub(super) fn common(&self) -> Common {
        common!(self, url_region(&self.queue))
    }
}

impl SnsConfig {
    /// Settings for `sns://TOPIC_ARN`, every other field at its default.
    pub fn from_spec(spec: &str) -> Result<Self, Error> {
        let mut config = SnsConfig::default();
        config.apply_spec(spec)?;
        Ok(config)
    }

    /// Takes the topic from `spec` (`sns://TOPIC_ARN`) and checks every
    /// field.
    pub fn apply_spec(&mut self, spec: &str) -> Result<(), Error> {
        let Some(arn) = spec.strip_prefix("sns://") else {
            return Err(SNS.invalid("topic_arn", shown(spec), SNS_FORM));
        };
        self.topic_arn = arn.to_owned();
        self.validate()
    }

    /// Checks every field; the error names the field, its value and the fix.
    pub fn validate(&self) -> Result<(), Error> {
        if topic_arn_parts(&self.topic_arn).is_none() {
            return Err(SNS.invalid("topic_arn", shown(&self.topic_arn), SNS_FORM));
        }
        self.common().check(SNS)
    }

    /// Whether the topic is a FIFO topic (its name ends in `.fifo`).
    pub fn is_fifo(&self) -> bool {
        self.topic_arn.ends_with(".fifo")
    }

    pub(super) fn common(&self) -> Common {
        common!(
            self,
            topic_arn_parts(&self.topic_arn).map(|(r, _)| r.to_owned())
        )
    }
}

#[cfg(test)]
mod tests;
