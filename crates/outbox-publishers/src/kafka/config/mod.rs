//! Settings of the Kafka publisher.
//!
//! A little over 400 lines: the `properties` table needs its own
//! deserializer so that a secret's value never reaches an error message.

use std::collections::BTreeMap;

use crate::broker::settings::{settings_debug, Settings};
use crate::{Error, Template};
use outbox::IDENTITY_HEADER_NAMES;

use serde::{Deserialize, Serialize};

/// The default destination template.
pub const DEFAULT_TOPIC_TEMPLATE: &str = "outbox.event.{aggregate_type}";

/// Producer properties the publisher sets itself: they carry the delivery
/// guarantees (or have a field of their own), so `properties` may not set
/// them.
const RESERVED: &[(&str, &str)] = &[
    ("bootstrap.servers", "use the `brokers` field"),
    ("metadata.broker.list", "use the `brokers` field"),
    (
        "acks",
        "it is always `all`: an event is delivered only once every in-sync replica has it",
    ),
    ("request.required.acks", "it is always `all`"),
    (
        "enable.idempotence",
        "it is always on: retries must not duplicate or reorder messages",
    ),
    (
        "max.in.flight.requests.per.connection",
        "use the `max_in_flight` field (1 to 5)",
    ),
    ("max.in.flight", "use the `max_in_flight` field (1 to 5)"),
    ("message.timeout.ms", "use the `message_timeout_ms` field"),
    ("delivery.timeout.ms", "use the `message_timeout_ms` field"),
    ("client.id", "use the `client_id` field"),
    (
        "transactional.id",
        "the outbox producer is idempotent, not transactional",
    ),
];

/// Property names whose values are secrets: never shown in `Debug` or
/// errors (the outbox's one rule, [`outbox::redact::is_secret_key`]).
fn is_secret(name: &str) -> bool {
    outbox::redact::is_secret_key(name)
}

/// Settings of [`crate::kafka::KafkaPublisher`].
///
/// ```
/// use outbox_publishers::kafka::KafkaConfig;
/// let config: KafkaConfig = serde_json::from_str(r#"{
///     "brokers": ["127.0.0.1:9092"],
///     "properties": {"compression.type": "lz4", "linger.ms": "5"}
/// }"#).unwrap();
/// config.validate().unwrap();
/// assert_eq!(config.topic_template, "outbox.event.{aggregate_type}");
/// ```
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct KafkaConfig {
    /// Bootstrap brokers, each `HOST:PORT` (librdkafka `bootstrap.servers`).
    pub brokers: Vec<String>,
    /// Topic for an event without a topic override: a [`Template`]
    /// (`{aggregate_type}`, `{event_type}`, `{aggregate_id}`,
    /// `{header.NAME}`, `{header.NAME:-DEFAULT}`). Default
    /// `outbox.event.{aggregate_type}`.
    pub topic_template: String,
    /// How long the producer keeps trying to deliver one message (librdkafka
    /// `message.timeout.ms`, which bounds its internal retries). Keep it below
    /// the relay's `publish_timeout_ms`, so the publisher can say what failed
    /// before the relay gives up on the call. Default 15000.
    pub message_timeout_ms: u64,
    /// Requests in flight per broker connection (librdkafka
    /// `max.in.flight.requests.per.connection`); at most 5, which the
    /// idempotent producer needs to keep order across retries. Default 5.
    pub max_in_flight: u32,
    /// How long a health check (a metadata request) may take. Default 5000.
    pub health_timeout_ms: u64,
    /// The producer's `client.id`, shown in broker logs and quotas. Default
    /// `outbox-relay`.
    pub client_id: String,
    /// The header that carries the event id in the plain envelope. Default
    /// `outbox-event-id`; `id` gives the message shape of Debezium's outbox
    /// event router (with the default topic template and the aggregate id
    /// as key). A producer header of the same name is not forwarded: the
    /// event id must be the only value a consumer finds there. CloudEvents
    /// carry the id as `ce_id` and ignore this field.
    pub event_id_header: String,
    /// Further librdkafka producer properties, passed through as they are:
    /// compression (`compression.type`), batching (`linger.ms`,
    /// `batch.size`), size limits (`message.max.bytes`), TLS
    /// (`security.protocol`, `ssl.ca.location`, …) and SASL
    /// (`sasl.mechanism`, `sasl.username`, `sasl.password`, …). Properties
    /// that carry the delivery guarantees (`acks`, `enable.idempotence`, …)
    /// are refused; secrets are never shown in `Debug` output or errors.
    /// Every value is a string, as librdkafka takes it (`"5"`, not `5`).
    #[serde(deserialize_with = "properties::deserialize")]
    pub properties: BTreeMap<String, String>,
}

impl Default for KafkaConfig {
    fn default() -> Self {
        KafkaConfig {
            brokers: vec!["127.0.0.1:9092".to_owned()],
            topic_template: DEFAULT_TOPIC_TEMPLATE.to_owned(),
            message_timeout_ms: 15_000,
            max_in_flight: 5,
            health_timeout_ms: 5_000,
            client_id: "outbox-relay".to_owned(),
            event_id_header: IDENTITY_HEADER_NAMES[0].to_owned(),
            properties: BTreeMap::new(),
        }
    }
}

/// `properties` as `Debug` shows them: secrets' values redacted.
fn shown_properties(properties: &BTreeMap<String, String>) -> BTreeMap<&str, &str> {
    properties
        .iter()
        .map(|(k, v)| {
            let shown = if is_secret(k) {
                "<redacted>"
            } else {
                v.as_str()
            };
            (k.as_str(), shown)
        })
        .collect()
}

settings_debug!(KafkaConfig {
    brokers, topic_template, message_timeout_ms, max_in_flight, health_timeout_ms, client_id,
    event_id_header, properties => shown_properties,
});

/// Reading `properties`: a value that is not a string is an error naming
/// the property and the expected type, showing the value only if the
/// property is not a secret (serde's own message would quote it).
mod properties {
    use std::collections::BTreeMap;
    use std::fmt;

    use serde::de::{self, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
    use serde::Deserialize;

    /// A property value as written: a string, or what it was instead.
    enum Value {
        Text(String),
        /// The kind of value, and the value if it is a scalar.
        Other(&'static str, Option<String>),
    }

    impl<'de> Deserialize<'de> for Value {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            struct V;
            impl<'de> Visitor<'de> for V {
                type Value = Value;
                fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                    f.write_str("a string")
                }
                fn visit_str<E: de::Error>(self, v: &str) -> Result<Value, E> {
                    Ok(Value::Text(v.to_owned()))
                }
                fn visit_string<E: de::Error>(self, v: String) -> Result<Value, E> {
                    Ok(Value::Text(v))
                }
                fn visit_bool<E: de::Error>(self, v: bool) -> Result<Value, E> {
                    Ok(Value::Other("a boolean", Some(v.to_string())))
                }
                fn visit_i64<E: de::Error>(self, v: i64) -> Result<Value, E> {
                    Ok(Value::Other("an integer", Some(v.to_string())))
                }
                fn visit_u64<E: de::Error>(self, v: u64) -> Result<Value, E> {
                    Ok(Value::Other("an integer", Some(v.to_string())))
                }
                fn visit_f64<E: de::Error>(self, v: f64) -> Result<Value, E> {
                    Ok(Value::Other("a number", Some(v.to_string())))
                }
                fn visit_unit<E: de::Error>(self) -> Result<Value, E> {
                    Ok(Value::Other("null", None))
                }
                fn visit_none<E: de::Error>(self) -> Result<Value, E> {
                    Ok(Value::Other("null", None))
                }
                fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
                    while seq.next_element::<IgnoredAny>()?.is_some() {}
                    Ok(Value::Other("an array", None))
                }
                fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
                    while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                    Ok(Value::Other("a table", None))
                }
            }
            d.deserialize_any(V)
        }
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<BTreeMap<String, String>, D::Error> {
        struct Props;
        impl<'de> Visitor<'de> for Props {
            type Value = BTreeMap<String, String>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a table of librdkafka properties, each value a string")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut out = BTreeMap::new();
                while let Some(name) = map.next_key::<String>()? {
                    match map.next_value::<Value>()? {
                        Value::Text(v) => {
                            out.insert(name, v);
                        }
                        Value::Other(kind, shown) => {
                            let shown = match shown {
                                Some(v) if !super::is_secret(&name) => format!(" ({v})"),
                                _ => String::new(),
                            };
                            let name = outbox::redact::redact_text(&name);
                            return Err(de::Error::custom(format!(
                                "property {name:?} must be a string, not {kind}{shown}: librdkafka takes every value as text, e.g. \"5\" or \"true\""
                            )));
                        }
                    }
                }
                Ok(out)
            }
        }
        d.deserialize_map(Props)
    }
}

/// Whether `name` is a legal Kafka topic name.
pub(crate) fn topic_problem(name: &str) -> Option<String> {
    if name.is_empty() {
        return Some("is empty".to_owned());
    }
    if name == "." || name == ".." {
        return Some("cannot be `.` or `..`".to_owned());
    }
    if name.len() > 249 {
        return Some(format!("is {} bytes long; Kafka allows 249", name.len()));
    }
    if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
    {
        return Some(format!(
            "contains {c:?}; Kafka topics use only ASCII letters, digits, `.`, `_` and `-`"
        ));
    }
    None
}

/// The checks of these settings, their errors naming `kafka`.
const KAFKA: Settings = Settings::of("kafka");

impl KafkaConfig {
    /// Settings for `kafka://HOST:PORT[,HOST:PORT…]`, every other field at
    /// its default.
    ///
    /// ```
    /// use outbox_publishers::kafka::KafkaConfig;
    /// let c = KafkaConfig::from_url("kafka://k1:9092,k2:9092").unwrap();
    /// assert_eq!(c.brokers, vec!["k1:9092", "k2:9092"]);
    /// ```
    pub fn from_url(url: &str) -> Result<Self, Error> {
        let rest = url.strip_prefix("kafka://").ok_or_else(|| {
            KAFKA.invalid(
                "url",
                url,
                "must start with kafka://, e.g. kafka://127.0.0.1:9092,broker2:9092",
            )
        })?;
        if rest.contains('@') {
            return Err(KAFKA.invalid(
                "url",
                "kafka://<credentials>@…",
                "credentials do not go in the URL: set properties sasl.username and sasl.password in the config file",
            ));
        }
        if rest.contains(['/', '?', '#']) {
            return Err(KAFKA.invalid(
                "url",
                url,
                "takes only a broker list (kafka://HOST:PORT,HOST:PORT); set other options in the config file",
            ));
        }
        let config = KafkaConfig {
            brokers: rest.split(',').map(|b| b.trim().to_owned()).collect(),
            ..KafkaConfig::default()
        };
        config.validate()?;
        Ok(config)
    }

    /// Checks every field; the error names the field, its value and the fix.
    pub fn validate(&self) -> Result<(), Error> {
        KAFKA.host_ports(
            "brokers",
            &self.brokers,
            ("broker", "127.0.0.1:9092"),
            |host| !host.contains([',', ' ', '/']),
            str::to_owned,
        )?;
        self.destination_template()?;
        KAFKA.publish_timeout(
            "message_timeout_ms",
            self.message_timeout_ms,
            1_000..=3_600_000,
        )?;
        KAFKA.within(
            "max_in_flight",
            self.max_in_flight,
            1..=5,
            "use 1 to 5: the idempotent producer keeps order only up to 5 requests in flight",
        )?;
        KAFKA.connect_timeout("health_timeout_ms", self.health_timeout_ms)?;
        if self.client_id.trim().is_empty() {
            return Err(KAFKA.invalid(
                "client_id",
                &self.client_id,
                "must not be empty; the default is outbox-relay",
            ));
        }
        let id_header = self.event_id_header.as_str();
        if id_header.trim().is_empty() || id_header.trim() != id_header {
            return Err(KAFKA.invalid(
                "event_id_header",
                id_header,
                "must be a header name without surrounding spaces; the default is outbox-event-id, `id` is Debezium's",
            ));
        }
        if IDENTITY_HEADER_NAMES[1..].contains(&id_header) {
            return Err(KAFKA.invalid(
                "event_id_header",
                id_header,
                "already carries another identity field; pick another name (the default is outbox-event-id)",
            ));
        }
        for (name, value) in &self.properties {
            let key = name.trim().to_ascii_lowercase();
            let shown = if is_secret(&key) { "<redacted>" } else { value };
            if let Some((_, fix)) = RESERVED.iter().find(|(k, _)| *k == key) {
                return Err(KAFKA.invalid(
                    format!("properties.{name}"),
                    shown,
                    format!("cannot be set here: {fix}"),
                ));
            }
            if key.is_empty() {
                return Err(KAFKA.invalid(
                    "properties",
                    "(an empty name)",
                    "property names cannot be empty",
                ));
            }
        }
        Ok(())
    }

    /// `topic_template`, parsed, or why it cannot make topic names.
    pub(crate) fn destination_template(&self) -> Result<Template, Error> {
        Template::setting("kafka", "topic_template", &self.topic_template, |name| {
            match topic_problem(name) {
                Some(problem) => Err(format!("does not make a valid topic name: it {problem}")),
                None => Ok(()),
            }
        })
    }

    /// The librdkafka producer properties: the guarantees, then the
    /// pass-through properties.
    pub(crate) fn client_properties(&self) -> Vec<(String, String)> {
        let mut out = vec![
            ("bootstrap.servers".to_owned(), self.brokers.join(",")),
            ("client.id".to_owned(), self.client_id.clone()),
            ("acks".to_owned(), "all".to_owned()),
            ("enable.idempotence".to_owned(), "true".to_owned()),
            (
                "max.in.flight.requests.per.connection".to_owned(),
                self.max_in_flight.to_string(),
            ),
            (
                "message.timeout.ms".to_owned(),
                self.message_timeout_ms.to_string(),
            ),
        ];
        out.extend(self.properties.iter().map(|(k, v)| (k.clone(), v.clone())));
        out
    }

    /// Whether a property holds a secret (for redaction elsewhere).
    pub(crate) fn is_secret(name: &str) -> bool {
        is_secret(name)
    }
}

#[cfg(test)]
mod tests;
