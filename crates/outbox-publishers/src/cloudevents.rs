//! Message formats: `plain` (the outbox's own headers around the payload),
//! and CloudEvents 1.0 in binary or structured content mode. The envelope
//! is built here, once, for every publisher; each publisher only says how
//! its protocol names the attributes (a [`Binding`]).
//!
//! Attributes of an event:
//!
//! | attribute         | value                                        |
//! |-------------------|----------------------------------------------|
//! | `specversion`     | `1.0`                                        |
//! | `id`              | the event id                                 |
//! | `source`          | [`Envelope::source`] (`/outbox/{schema}`)    |
//! | `type`            | the event type                               |
//! | `subject`         | the aggregate id                             |
//! | `time`            | `created_at`, RFC 3339, UTC                  |
//! | `datacontenttype` | `application/json`                           |
//! | `aggregatetype`   | the aggregate type (extension)               |
//! | `partitionkey`    | the aggregate id (Partitioning extension)    |
//! | `traceparent`     | the event's `traceparent` header, if any     |
//! | `tracestate`      | the event's `tracestate` header, if any      |
//!
//! In binary mode `datacontenttype` is the protocol's content type and
//! every other attribute is a header named by the binding's prefix
//! (`ce_id`, `ce-id`, `cloudEvents:id`); the body is the payload as
//! stored. In structured mode the body is one JSON object
//! (`application/cloudevents+json`) whose `data` is the payload's stored
//! JSON text, embedded without being parsed into numbers and back.
//!
//! Longer than most files: the three formats and the per-protocol bindings
//! are one mapping, checked together by the unit tests at the end.

use std::borrow::Cow;
use std::fmt;
use std::str::FromStr;

use chrono::SecondsFormat;
use outbox::redact::shorten;
use outbox::Event;
use serde::Serialize;
use serde_json::value::RawValue;

/// `datacontenttype` of every event: payloads are JSON.
pub const DATA_CONTENT_TYPE: &str = "application/json";
/// The content type of a structured-mode message.
pub const STRUCTURED_CONTENT_TYPE: &str = "application/cloudevents+json";
/// The default `source`; `{schema}` is replaced by the outbox's schema.
pub const DEFAULT_SOURCE: &str = "/outbox/{schema}";
/// The CloudEvents version written.
pub const SPEC_VERSION: &str = "1.0";

/// How events become messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Format {
    /// The outbox's own `outbox-*` headers and the payload as the body.
    #[default]
    Plain,
    /// CloudEvents binary content mode: attributes as protocol headers,
    /// the payload as the body.
    CloudEventsBinary,
    /// CloudEvents structured content mode: one `application/cloudevents+json`
    /// body holding the attributes and the payload.
    CloudEventsStructured,
}

impl Format {
    /// Every format, as configuration names it.
    pub const NAMES: [&'static str; 3] = ["plain", "cloudevents-binary", "cloudevents-structured"];

    /// The name used in configuration.
    pub fn name(self) -> &'static str {
        match self {
            Format::Plain => Self::NAMES[0],
            Format::CloudEventsBinary => Self::NAMES[1],
            Format::CloudEventsStructured => Self::NAMES[2],
        }
    }
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Format {
    type Err = String;

    /// Parses a configuration name; the error lists the accepted names.
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "plain" => Ok(Format::Plain),
            "cloudevents-binary" => Ok(Format::CloudEventsBinary),
            "cloudevents-structured" => Ok(Format::CloudEventsStructured),
            _ => Err(format!(
                "{:?} is not a message format: use plain, cloudevents-binary or cloudevents-structured",
                shorten(s, 60)
            )),
        }
    }
}

/// A publisher's message format and, for CloudEvents, the `source`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Envelope {
    format: Format,
    source: String,
}

impl Default for Envelope {
    fn default() -> Self {
        Envelope::plain()
    }
}

impl Envelope {
    /// Today's messages, unchanged.
    pub fn plain() -> Self {
        Envelope {
            format: Format::Plain,
            source: source_for(DEFAULT_SOURCE, "public"),
        }
    }

    /// `format` with `source` as the CloudEvents `source` attribute.
    pub fn new(format: Format, source: impl Into<String>) -> Self {
        Envelope {
            format,
            source: source.into(),
        }
    }

    /// The format.
    pub fn format(&self) -> Format {
        self.format
    }

    /// Whether messages are the outbox's own (no CloudEvents envelope).
    pub fn is_plain(&self) -> bool {
        self.format == Format::Plain
    }

    /// The `source` attribute.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// Calls `add(name, value)` for every binary-mode attribute of `event`
    /// but `datacontenttype` (the binding's content type carries it), with
    /// names from `binding`. Values are percent-encoded if the binding
    /// asks for it.
    pub fn binary_attributes(
        &self,
        event: &Event,
        binding: &Binding,
        mut add: impl FnMut(&'static str, &str),
    ) {
        let n = &binding.names;
        let mut id = uuid::Uuid::encode_buffer();
        add(n.specversion, SPEC_VERSION);
        add(n.id, event.id.hyphenated().encode_lower(&mut id));
        add_encoded(binding, n.source, &self.source, &mut add);
        add_encoded(binding, n.type_, &event.event_type, &mut add);
        add_encoded(binding, n.subject, &event.aggregate_id, &mut add);
        add(n.time, &time(event));
        add_encoded(binding, n.aggregatetype, &event.aggregate_type, &mut add);
        add_encoded(binding, n.partitionkey, &event.aggregate_id, &mut add);
        if let Some(v) = event.headers.get(TRACEPARENT) {
            add_encoded(binding, n.traceparent, v, &mut add);
        }
        if let Some(v) = event.headers.get(TRACESTATE) {
            add_encoded(binding, n.tracestate, v, &mut add);
        }
    }

    /// Appends `event`'s structured-mode body to `out`.
    pub fn write_structured(&self, event: &Event, out: &mut Vec<u8>) {
        #[derive(Serialize)]
        struct Structured<'a> {
            specversion: &'static str,
            id: &'a uuid::Uuid,
            source: &'a str,
            #[serde(rename = "type")]
            type_: &'a str,
            subject: &'a str,
            time: String,
            datacontenttype: &'static str,
            aggregatetype: &'a str,
            partitionkey: &'a str,
            #[serde(skip_serializing_if = "Option::is_none")]
            traceparent: Option<&'a str>,
            #[serde(skip_serializing_if = "Option::is_none")]
            tracestate: Option<&'a str>,
            data: Data<'a>,
        }
        #[derive(Serialize)]
        #[serde(untagged)]
        enum Data<'a> {
            Json(&'a RawValue),
            Text(&'a str),
        }
        // The stored text, never parsed into numbers and back. A payload
        // that is not JSON (only an `Event` built by hand) becomes a string.
        // `Event::write_json_line` in the outbox crate does the same for its
        // line; the enum stays a private detail on each side rather than
        // becoming public API of `Event` for three lines.
        let data = match serde_json::from_str::<&RawValue>(&event.payload) {
            Ok(raw) => Data::Json(raw),
            Err(_) => Data::Text(&event.payload),
        };
        let body = Structured {
            specversion: SPEC_VERSION,
            id: &event.id,
            source: &self.source,
            type_: &event.event_type,
            subject: &event.aggregate_id,
            time: time(event),
            datacontenttype: DATA_CONTENT_TYPE,
            aggregatetype: &event.aggregate_type,
            partitionkey: &event.aggregate_id,
            traceparent: event.headers.get(TRACEPARENT).map(String::as_str),
            tracestate: event.headers.get(TRACESTATE).map(String::as_str),
            data,
        };
        // Strings and already-valid JSON into a Vec: cannot fail.
        serde_json::to_writer(out, &body).expect("a CloudEvent of valid parts");
    }

    /// [`Envelope::write_structured`] into a new buffer.
    pub fn structured(&self, event: &Event) -> Vec<u8> {
        let mut out = Vec::with_capacity(320 + self.source.len() + event.payload.len());
        self.write_structured(event, &mut out);
        out
    }

    /// The body of `event`'s message: the payload as stored, or in
    /// structured mode the CloudEvent.
    pub fn body<'a>(&self, event: &'a Event) -> Cow<'a, [u8]> {
        match self.format {
            Format::CloudEventsStructured => Cow::Owned(self.structured(event)),
            _ => Cow::Borrowed(event.payload.as_bytes()),
        }
    }

    /// The content type of `event`'s message body.
    pub fn content_type(&self) -> &'static str {
        match self.format {
            Format::CloudEventsStructured => STRUCTURED_CONTENT_TYPE,
            _ => DATA_CONTENT_TYPE,
        }
    }

    /// Whether the producer's header `name` may travel beside a CloudEvent
    /// of `binding`: a header that looks like an attribute of the binding
    /// (`ce_…`, any case) would pass for one, so it is left out.
    pub fn forwards(binding: &Binding, name: &str) -> bool {
        let p = binding.prefix;
        !(name.len() >= p.len() && name.as_bytes()[..p.len()].eq_ignore_ascii_case(p.as_bytes()))
    }
}

fn add_encoded(
    binding: &Binding,
    name: &'static str,
    value: &str,
    add: &mut impl FnMut(&'static str, &str),
) {
    if binding.percent_encode {
        add(name, &percent_encode(value));
    } else {
        add(name, value);
    }
}

const TRACEPARENT: &str = "traceparent";
const TRACESTATE: &str = "tracestate";

/// `created_at` in RFC 3339, UTC, with as many fraction digits as needed
/// (0, 3, 6 or 9), exactly as chrono's `to_rfc3339_opts(AutoSi, true)`
/// writes it, without its formatting machinery: every message of a
/// CloudEvents format carries one.
fn time(event: &Event) -> String {
    use chrono::{Datelike, Timelike};
    let t = event.created_at;
    let (year, nanos) = (t.year(), t.nanosecond());
    if !(0..=9999).contains(&year) || nanos >= 1_000_000_000 {
        // Years chrono writes with a sign, and leap seconds.
        return t.to_rfc3339_opts(SecondsFormat::AutoSi, true);
    }
    let mut out = String::with_capacity(30);
    push_digits(&mut out, year as u32, 4);
    out.push('-');
    push_digits(&mut out, t.month(), 2);
    out.push('-');
    push_digits(&mut out, t.day(), 2);
    out.push('T');
    push_digits(&mut out, t.hour(), 2);
    out.push(':');
    push_digits(&mut out, t.minute(), 2);
    out.push(':');
    push_digits(&mut out, t.second(), 2);
    if nanos != 0 {
        out.push('.');
        if nanos % 1_000_000 == 0 {
            push_digits(&mut out, nanos / 1_000_000, 3);
        } else if nanos % 1_000 == 0 {
            push_digits(&mut out, nanos / 1_000, 6);
        } else {
            push_digits(&mut out, nanos, 9);
        }
    }
    out.push('Z');
    out
}

/// Appends `value` as `width` decimal digits, zero-padded.
fn push_digits(out: &mut String, value: u32, width: u32) {
    let mut div = 10u32.pow(width - 1);
    while div > 0 {
        out.push(char::from(b'0' + (value / div % 10) as u8));
        div /= 10;
    }
}

/// `source` with `{schema}` replaced by `schema`.
pub fn source_for(template: &str, schema: &str) -> String {
    template.replace("{schema}", schema)
}

/// `value` with every byte outside printable ASCII, and `"` and `%`,
/// percent-encoded, as the HTTP binding requires of header values.
pub fn percent_encode(value: &str) -> Cow<'_, str> {
    let keep = |b: u8| (0x21..=0x7e).contains(&b) && b != b'"' && b != b'%';
    if value.bytes().all(keep) {
        return Cow::Borrowed(value);
    }
    let mut out = String::with_capacity(value.len() + 8);
    for b in value.bytes() {
        if keep(b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    Cow::Owned(out)
}

/// The attribute names of one binding, prefix included.
#[derive(Debug, Clone, Copy)]
pub struct Names {
    /// `specversion`.
    pub specversion: &'static str,
    /// `id`.
    pub id: &'static str,
    /// `source`.
    pub source: &'static str,
    /// `type`.
    pub type_: &'static str,
    /// `subject`.
    pub subject: &'static str,
    /// `time`.
    pub time: &'static str,
    /// `aggregatetype`.
    pub aggregatetype: &'static str,
    /// `partitionkey`.
    pub partitionkey: &'static str,
    /// `traceparent`.
    pub traceparent: &'static str,
    /// `tracestate`.
    pub tracestate: &'static str,
}

/// How one protocol carries binary-mode attributes.
#[derive(Debug, Clone, Copy)]
pub struct Binding {
    /// The attribute prefix: `ce_`, `ce-`, `cloudEvents:`.
    pub prefix: &'static str,
    /// Every attribute's header name.
    pub names: Names,
    /// Whether values are percent-encoded (text protocols limited to
    /// printable ASCII).
    pub percent_encode: bool,
}

macro_rules! binding {
    ($prefix:literal, $encode:expr) => {
        Binding {
            prefix: $prefix,
            names: Names {
                specversion: concat!($prefix, "specversion"),
                id: concat!($prefix, "id"),
                source: concat!($prefix, "source"),
                type_: concat!($prefix, "type"),
                subject: concat!($prefix, "subject"),
                time: concat!($prefix, "time"),
                aggregatetype: concat!($prefix, "aggregatetype"),
                partitionkey: concat!($prefix, "partitionkey"),
                traceparent: concat!($prefix, "traceparent"),
                tracestate: concat!($prefix, "tracestate"),
            },
            percent_encode: $encode,
        }
    };
}

/// Kafka protocol binding: `ce_` headers (values UTF-8, as they are).
pub const KAFKA: Binding = binding!("ce_", false);
/// HTTP protocol binding: `ce-` headers, values percent-encoded.
pub const HTTP: Binding = binding!("ce-", true);
/// NATS protocol binding: `ce-` headers, values percent-encoded as in
/// HTTP (NATS headers are HTTP-style text lines).
pub const NATS: Binding = binding!("ce-", true);
/// AMQP protocol binding: `cloudEvents:` application properties (headers
/// of an AMQP 0-9-1 message).
pub const AMQP: Binding = binding!("cloudEvents:", false);
/// Redis Streams (no official binding): the Kafka binding's `ce_` names as
/// entry fields.
pub const REDIS: Binding = binding!("ce_", false);

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;
    use std::collections::BTreeMap;

    fn event() -> Event {
        Event {
            id: "0190a7b4-1c2d-7e3f-8a9b-0c1d2e3f4a5b".parse().unwrap(),
            seq: 7,
            aggregate_type: "order".into(),
            aggregate_id: "order-42".into(),
            event_type: "order.created".into(),
            payload: r#"{"n": 1e400, "big": 123456789012345678901234567890}"#.into(),
            headers: BTreeMap::from([
                (
                    "traceparent".into(),
                    "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".into(),
                ),
                ("tracestate".into(), "congo=t61rcWkgMzE".into()),
                ("x-tenant".into(), "acme".into()),
            ]),
            topic: None,
            attempts: 0,
            created_at: chrono::Utc.with_ymd_and_hms(2026, 12, 1, 6, 9, 46).unwrap()
                + chrono::Duration::microseconds(123_456),
            partition: 0,
        }
    }

    fn binary(e: &Event, b: &Binding) -> Vec<(String, String)> {
        let mut out = Vec::new();
        Envelope::new(Format::CloudEventsBinary, "/outbox/public").binary_attributes(
            e,
            b,
            |k, v| out.push((k.to_owned(), v.to_owned())),
        );
        out
    }

    #[test]
    fn time_is_written_as_chrono_writes_it() {
        let base = chrono::Utc.with_ymd_and_hms(2026, 1, 2, 3, 4, 5).unwrap();
        let mut e = event();
        for (secs, nanos) in [
            (0, 0),
            (0, 120_000_000),
            (59, 123_456_000),
            (86_399, 1),
            (31_536_000, 999_999_999),
            (-1_000_000_000, 5_000),
        ] {
            e.created_at =
                base + chrono::Duration::seconds(secs) + chrono::Duration::nanoseconds(nanos);
            assert_eq!(
                time(&e),
                e.created_at.to_rfc3339_opts(SecondsFormat::AutoSi, true)
            );
        }
        e.created_at = chrono::Utc.with_ymd_and_hms(12_345, 1, 1, 0, 0, 0).unwrap();
        assert_eq!(time(&e), "+12345-01-01T00:00:00Z");
    }

    #[test]
    fn formats_parse_by_name_and_refuse_others_listing_the_names() {
        for name in Format::NAMES {
            assert_eq!(name.parse::<Format>().unwrap().name(), name);
        }
        assert_eq!(Format::default(), Format::Plain);
        let e = "cloudevents".parse::<Format>().unwrap_err();
        assert!(
            e.contains("\"cloudevents\"")
                && e.contains("plain, cloudevents-binary or cloudevents-structured"),
            "{e}"
        );
    }

    #[test]
    fn binary_attributes_carry_every_attribute_under_the_binding_names() {
        let e = event();
        let got = binary(&e, &KAFKA);
        let want = [
            ("ce_specversion", "1.0"),
            ("ce_id", "0190a7b4-1c2d-7e3f-8a9b-0c1d2e3f4a5b"),
            ("ce_source", "/outbox/public"),
            ("ce_type", "order.created"),
            ("ce_subject", "order-42"),
            ("ce_time", "2026-12-01T06:09:46.123456Z"),
            ("ce_aggregatetype", "order"),
            ("ce_partitionkey", "order-42"),
            (
                "ce_traceparent",
                "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            ),
            ("ce_tracestate", "congo=t61rcWkgMzE"),
        ];
        let want: Vec<(String, String)> = want
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        assert_eq!(got, want);
        let amqp = binary(&e, &AMQP);
        assert_eq!(amqp[1].0, "cloudEvents:id");
        assert_eq!(binary(&e, &HTTP)[3].0, "ce-type");
        // no trace headers: no trace attributes
        let mut bare = event();
        bare.headers.clear();
        assert_eq!(binary(&bare, &KAFKA).len(), 8);
    }

    #[test]
    fn http_values_are_percent_encoded_and_kafka_values_are_not() {
        let mut e = event();
        e.aggregate_id = "é 100%\"".into();
        let http = binary(&e, &HTTP);
        assert_eq!(http[4], ("ce-subject".into(), "%C3%A9%20100%25%22".into()));
        let kafka = binary(&e, &KAFKA);
        assert_eq!(kafka[4].1, "é 100%\"");
        assert_eq!(percent_encode("order-42"), Cow::Borrowed("order-42"));
    }

    #[test]
    fn structured_body_embeds_the_stored_payload_text() {
        let e = event();
        let env = Envelope::new(Format::CloudEventsStructured, "/outbox/shop");
        let body = String::from_utf8(env.structured(&e)).unwrap();
        assert_eq!(
            body,
            concat!(
                r#"{"specversion":"1.0","id":"0190a7b4-1c2d-7e3f-8a9b-0c1d2e3f4a5b","#,
                r#""source":"/outbox/shop","type":"order.created","subject":"order-42","#,
                r#""time":"2026-12-01T06:09:46.123456Z","datacontenttype":"application/json","#,
                r#""aggregatetype":"order","partitionkey":"order-42","#,
                r#""traceparent":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01","#,
                r#""tracestate":"congo=t61rcWkgMzE","#,
                r#""data":{"n": 1e400, "big": 123456789012345678901234567890}}"#
            )
        );
        assert_eq!(env.content_type(), STRUCTURED_CONTENT_TYPE);
        assert_eq!(env.body(&e).as_ref(), body.as_bytes());
        let mut not_json = event();
        not_json.payload = "not json".into();
        not_json.headers.clear();
        let body = String::from_utf8(env.structured(&not_json)).unwrap();
        assert!(
            body.ends_with(r#""partitionkey":"order-42","data":"not json"}"#),
            "{body}"
        );
    }

    #[test]
    fn plain_and_binary_bodies_are_the_payload_itself() {
        let e = event();
        for env in [
            Envelope::plain(),
            Envelope::new(Format::CloudEventsBinary, "/x"),
        ] {
            assert!(matches!(env.body(&e), Cow::Borrowed(b) if b == e.payload.as_bytes()));
            assert_eq!(env.content_type(), DATA_CONTENT_TYPE);
        }
        assert!(Envelope::default().is_plain());
        assert_eq!(Envelope::default().source(), "/outbox/public");
        assert_eq!(source_for("/outbox/{schema}", "shop"), "/outbox/shop");
    }

    #[test]
    fn producer_headers_that_look_like_attributes_are_not_forwarded() {
        assert!(Envelope::forwards(&KAFKA, "traceparent"));
        assert!(Envelope::forwards(&KAFKA, "ce-id"));
        assert!(!Envelope::forwards(&KAFKA, "CE_id"));
        assert!(!Envelope::forwards(&HTTP, "Ce-Type"));
        assert!(!Envelope::forwards(&AMQP, "cloudevents:id"));
        assert!(Envelope::forwards(&AMQP, "ce"));
    }
}
