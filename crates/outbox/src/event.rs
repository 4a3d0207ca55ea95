//! Events: what a producer writes ([`NewEvent`]) and what the relay hands to
//! a publisher ([`Event`]).

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::value::RawValue;
use uuid::Uuid;

use crate::error::{Error, Result};

/// Longest `aggregate_type`, `aggregate_id` and `event_type`, in characters
/// (the columns are `VARCHAR(100)`, as in the seed).
pub const MAX_NAME_CHARS: usize = 100;
/// Longest topic override, in characters (`VARCHAR(255)`).
pub const MAX_TOPIC_CHARS: usize = 255;
/// Longest header name, in characters.
pub const MAX_HEADER_NAME_CHARS: usize = 255;

/// An event to be written by [`crate::Outbox::enqueue`].
///
/// ```
/// use outbox::NewEvent;
/// let event = NewEvent::new("order", "42", "order.created", &serde_json::json!({"total": 10}))
///     .unwrap()
///     .header("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
///     .topic("orders");
/// assert!(event.validate().is_ok());
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct NewEvent {
    /// The event id; generated (UUID v7) unless set. Consumers deduplicate on it.
    pub id: Uuid,
    /// The kind of entity the event is about, e.g. `order`.
    pub aggregate_type: String,
    /// The entity's id; events of one aggregate are delivered in enqueue order.
    pub aggregate_id: String,
    /// What happened, e.g. `order.created`.
    pub event_type: String,
    /// The event body; any JSON value.
    pub payload: serde_json::Value,
    /// Extra message headers (for example `traceparent`).
    pub headers: BTreeMap<String, String>,
    /// A destination that overrides the publisher's template.
    pub topic: Option<String>,
}

impl NewEvent {
    /// Builds an event, serialising `payload` with serde.
    pub fn new(
        aggregate_type: impl Into<String>,
        aggregate_id: impl Into<String>,
        event_type: impl Into<String>,
        payload: &impl Serialize,
    ) -> Result<Self> {
        let payload = serde_json::to_value(payload).map_err(|source| Error::Serialize {
            field: "payload",
            source,
        })?;
        Ok(Self::json(
            aggregate_type,
            aggregate_id,
            event_type,
            payload,
        ))
    }

    /// Builds an event from a JSON value.
    pub fn json(
        aggregate_type: impl Into<String>,
        aggregate_id: impl Into<String>,
        event_type: impl Into<String>,
        payload: serde_json::Value,
    ) -> Self {
        NewEvent {
            id: Uuid::now_v7(),
            aggregate_type: aggregate_type.into(),
            aggregate_id: aggregate_id.into(),
            event_type: event_type.into(),
            payload,
            headers: BTreeMap::new(),
            topic: None,
        }
    }

    /// Adds a header.
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.insert(name.into(), value.into());
        self
    }

    /// Sets a topic override.
    pub fn topic(mut self, topic: impl Into<String>) -> Self {
        self.topic = Some(topic.into());
        self
    }

    /// Sets the event id (for idempotent producers that derive it).
    pub fn with_id(mut self, id: Uuid) -> Self {
        self.id = id;
        self
    }

    /// Checks every field against the table's limits; [`crate::Outbox::enqueue`]
    /// calls it before writing anything.
    pub fn validate(&self) -> Result<()> {
        check_name("aggregate_type", &self.aggregate_type)?;
        check_name("aggregate_id", &self.aggregate_id)?;
        check_name("event_type", &self.event_type)?;
        if let Some(topic) = &self.topic {
            check_len("topic", topic, MAX_TOPIC_CHARS)?;
            if topic.trim().is_empty() {
                return Err(Error::invalid(
                    "topic",
                    "is empty: leave it unset to use the publisher's destination template",
                ));
            }
        }
        for (name, value) in &self.headers {
            check_len("header name", name, MAX_HEADER_NAME_CHARS)?;
            if name.is_empty() {
                return Err(Error::invalid("header name", "is empty"));
            }
            if value.contains('\0') || name.contains('\0') {
                return Err(Error::invalid(
                    format!("header {name:?}"),
                    "contains a NUL character, which PostgreSQL cannot store",
                ));
            }
        }
        if contains_nul(&self.payload) {
            return Err(Error::invalid(
                "payload",
                "contains a NUL character (\\u0000), which PostgreSQL jsonb cannot store",
            ));
        }
        Ok(())
    }
}

fn check_name(field: &str, value: &str) -> Result<()> {
    if value.trim().is_empty() {
        return Err(Error::invalid(field, "is empty: every event needs one"));
    }
    if value.contains('\0') {
        return Err(Error::invalid(field, "contains a NUL character"));
    }
    check_len(field, value, MAX_NAME_CHARS)
}

fn check_len(field: &str, value: &str, max: usize) -> Result<()> {
    let n = value.chars().count();
    if n > max {
        let shown: String = value.chars().take(20).collect();
        return Err(Error::invalid(
            field,
            format!("{shown:?}… is {n} characters long; the column holds at most {max}"),
        ));
    }
    Ok(())
}

fn contains_nul(value: &serde_json::Value) -> bool {
    use serde_json::Value;
    match value {
        Value::String(s) => s.contains('\0'),
        Value::Array(items) => items.iter().any(contains_nul),
        Value::Object(map) => map.iter().any(|(k, v)| k.contains('\0') || contains_nul(v)),
        _ => false,
    }
}

/// A committed event, as claimed by the relay and handed to a publisher.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    /// The event id (put in every message so consumers can deduplicate).
    pub id: Uuid,
    /// The insertion sequence: the order of events within an aggregate.
    pub seq: i64,
    /// The aggregate's kind.
    pub aggregate_type: String,
    /// The aggregate's id; the message key.
    pub aggregate_id: String,
    /// The event's kind.
    pub event_type: String,
    /// The payload as JSON text, ready to send as message bytes.
    pub payload: String,
    /// Headers written by the producer.
    pub headers: BTreeMap<String, String>,
    /// The producer's topic override, if any.
    pub topic: Option<String>,
    /// Failed delivery attempts so far.
    pub attempts: i32,
    /// When the producing transaction started (the seed's column).
    pub created_at: DateTime<Utc>,
    /// The ownership partition, derived from `aggregate_id`.
    pub partition: i32,
}

/// The names of the identity headers every publisher sends before the
/// producer's own, in order (see [`Event::message_headers`]).
pub const IDENTITY_HEADER_NAMES: [&str; 4] = [
    "outbox-event-id",
    "outbox-event-type",
    "outbox-aggregate-type",
    "outbox-aggregate-id",
];

impl Event {
    /// The destination for this event: its topic override, or `template` with
    /// `{aggregate_type}` and `{event_type}` replaced (other text is kept as
    /// it is).
    ///
    /// A convenience for publishers built on this crate alone. The
    /// publishers of `outbox-publishers` use its `Template` instead: the
    /// full syntax (`{aggregate_id}`, `{header.NAME}`, defaults, escaped
    /// braces), parsed and checked once at start-up, rendered with one
    /// allocation. Both give the same destination for a template whose only
    /// braces are these two placeholders.
    pub fn destination(&self, template: &str) -> String {
        match &self.topic {
            Some(topic) => topic.clone(),
            None => template
                .replace("{aggregate_type}", &self.aggregate_type)
                .replace("{event_type}", &self.event_type),
        }
    }

    /// The headers every publisher sends: the event's identity first, then
    /// the producer's own headers (`traceparent` among them).
    pub fn message_headers(&self) -> Vec<(String, String)> {
        let id = self.id.to_string();
        let mut out = Vec::with_capacity(IDENTITY_HEADER_NAMES.len() + self.headers.len());
        for (name, value) in self.identity_headers(&id) {
            out.push((name.to_owned(), value.to_owned()));
        }
        for (k, v) in &self.headers {
            out.push((k.clone(), v.clone()));
        }
        out
    }

    /// The identity headers of [`Event::message_headers`], borrowed, for a
    /// publisher that copies each value once into its own header type:
    /// `id` is the event's id as text (`self.id.to_string()`).
    pub fn identity_headers<'a>(
        &'a self,
        id: &'a str,
    ) -> [(&'static str, &'a str); IDENTITY_HEADER_NAMES.len()] {
        let [event_id, event_type, aggregate_type, aggregate_id] = IDENTITY_HEADER_NAMES;
        [
            (event_id, id),
            (event_type, &self.event_type),
            (aggregate_type, &self.aggregate_type),
            (aggregate_id, &self.aggregate_id),
        ]
    }

    /// Appends the JSON-lines form used by the stdout and file publishers to
    /// `out`, without the trailing newline.
    ///
    /// The payload is embedded as the very text PostgreSQL returned for the
    /// `jsonb`, never re-parsed into numbers and back: `1e400`, a 30-digit
    /// integer or 200 nested arrays arrive as stored. A payload that is not
    /// JSON at all (only possible for an `Event` built by hand) is written as
    /// a JSON string, so the line stays valid.
    pub fn write_json_line(&self, out: &mut Vec<u8>) {
        #[derive(Serialize)]
        struct Line<'a> {
            id: &'a Uuid,
            seq: i64,
            aggregate_type: &'a str,
            aggregate_id: &'a str,
            event_type: &'a str,
            payload: Payload<'a>,
            headers: &'a BTreeMap<String, String>,
            topic: Option<&'a str>,
            created_at: &'a DateTime<Utc>,
        }
        #[derive(Serialize)]
        #[serde(untagged)]
        enum Payload<'a> {
            Json(&'a RawValue),
            Text(&'a str),
        }
        let payload = match serde_json::from_str::<&RawValue>(&self.payload) {
            Ok(raw) => Payload::Json(raw),
            Err(_) => Payload::Text(&self.payload),
        };
        let line = Line {
            id: &self.id,
            seq: self.seq,
            aggregate_type: &self.aggregate_type,
            aggregate_id: &self.aggregate_id,
            event_type: &self.event_type,
            payload,
            headers: &self.headers,
            topic: self.topic.as_deref(),
            created_at: &self.created_at,
        };
        // Writing plain strings, numbers and already-valid JSON into a Vec
        // cannot fail.
        serde_json::to_writer(out, &line).expect("a JSON line of valid parts");
    }

    /// [`Event::write_json_line`] as a string.
    pub fn json_line(&self) -> String {
        let mut out = Vec::with_capacity(256 + self.payload.len());
        self.write_json_line(&mut out);
        String::from_utf8(out).expect("serde_json writes UTF-8")
    }
}

/// An event of `aggregate_id` with seq `seq` and an empty payload, for the
/// crate's unit tests.
#[cfg(test)]
pub(crate) fn test_event(seq: i64, aggregate_id: &str) -> Event {
    Event {
        id: Uuid::new_v4(),
        seq,
        aggregate_type: "order".into(),
        aggregate_id: aggregate_id.into(),
        event_type: "order.created".into(),
        payload: "{}".into(),
        headers: BTreeMap::new(),
        topic: None,
        attempts: 0,
        created_at: Utc::now(),
        partition: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ok() -> NewEvent {
        NewEvent::json("order", "1", "order.created", json!({"a": 1}))
    }

    #[test]
    fn rejects_empty_and_long_fields_naming_them() {
        let mut e = ok();
        e.aggregate_id = " ".into();
        assert!(e
            .validate()
            .unwrap_err()
            .to_string()
            .contains("aggregate_id"));
        let mut e = ok();
        e.event_type = "x".repeat(101);
        let msg = e.validate().unwrap_err().to_string();
        assert!(
            msg.contains("event_type") && msg.contains("101") && msg.contains("100"),
            "{msg}"
        );
        let e = ok().topic("t".repeat(256));
        assert!(e.validate().unwrap_err().to_string().contains("topic"));
        let e = NewEvent::json("order", "1", "x", json!({"s": "a\u{0}b"}));
        assert!(e.validate().unwrap_err().to_string().contains("payload"));
        // multi-byte characters count as one each, as VARCHAR does
        let mut e = ok();
        e.aggregate_id = "é".repeat(100);
        assert!(e.validate().is_ok());
    }

    #[test]
    fn destination_uses_override_or_template() {
        let ev = test_event(1, "1");
        assert_eq!(
            ev.destination("outbox.event.{aggregate_type}"),
            "outbox.event.order"
        );
        let ev = Event {
            topic: Some("x".into()),
            ..ev
        };
        assert_eq!(ev.destination("outbox.event.{aggregate_type}"), "x");
    }
}
