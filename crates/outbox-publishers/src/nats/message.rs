//! An event as a NATS message: subject, headers and body, or why it can
//! never be sent.

use std::str::FromStr;

use async_nats::header::{HeaderName, HeaderValue};
use async_nats::HeaderMap;
use bytes::Bytes;
use outbox::redact::shorten;
use outbox::{Event, IDENTITY_HEADER_NAMES};

use super::config::check_subject;
use crate::cloudevents::{Format, NATS};
use crate::{Envelope, Template};

/// JetStream's de-duplication header: a message whose id the stream has
/// seen within its duplicate window is acknowledged but not stored again.
pub(super) const MSG_ID_HEADER: &str = "Nats-Msg-Id";

/// Bytes of the header block around the headers: `NATS/1.0\r\n` before
/// them, `\r\n` after.
const HEADER_FRAME_BYTES: usize = 10 + 2;

/// `name` as a NATS header name, or why it cannot be one.
fn header_name(name: &str) -> Result<HeaderName, String> {
    HeaderName::from_str(name).map_err(|_| {
        format!(
            "header name {:?} cannot be sent over NATS: names are printable ASCII without ':' or spaces",
            shorten(name, 60)
        )
    })
}

/// `value` of header `name` as a NATS header value, or why it cannot be one.
fn header_value(name: &str, value: &str) -> Result<HeaderValue, String> {
    HeaderValue::from_str(value).map_err(|_| {
        format!(
            "the value of header {:?} contains a line break, which NATS headers cannot carry",
            shorten(name, 60)
        )
    })
}

/// A message ready to publish.
pub(super) struct Message {
    pub(super) subject: String,
    pub(super) headers: HeaderMap,
    pub(super) payload: Bytes,
}

/// The message for `event` with subject `template`, or why it can
/// never be sent (checked before sending: the server closes a connection
/// that sends a message above its `max_payload`, and a malformed header
/// would corrupt the protocol stream).
pub(super) fn message(
    event: &Event,
    template: &Template,
    max_payload: usize,
    envelope: &Envelope,
) -> Result<Message, String> {
    let subject = template.destination(event)?.into_owned();
    if let Err(why) = check_subject(&subject) {
        return Err(format!(
            "subject {:?} is not a valid NATS subject: {why}",
            shorten(&subject, 60)
        ));
    }
    let mut headers = HeaderMap::new();
    let mut header_bytes = HEADER_FRAME_BYTES;
    let id = event.id.to_string();
    if envelope.is_plain() {
        // The identity's names are known good: only the values are checked
        // (and each copied once).
        let msg_id = [(MSG_ID_HEADER, id.as_str())];
        for (name, value) in msg_id.into_iter().chain(event.identity_headers(&id)) {
            let value = header_value(name, value)?;
            header_bytes += name.len() + 2 + value.as_str().len() + 2;
            headers.insert(HeaderName::from_static(name), value);
        }
        for (name, value) in &event.headers {
            // The identity comes first and wins over a producer header of
            // the same name.
            let (parsed_name, parsed_value) = (header_name(name)?, header_value(name, value)?);
            let identity = name == MSG_ID_HEADER || IDENTITY_HEADER_NAMES.contains(&name.as_str());
            if !identity {
                header_bytes += name.len() + 2 + value.len() + 2;
                headers.insert(parsed_name, parsed_value);
            }
        }
    } else {
        let mut add = |headers: &mut HeaderMap, name: &str, value: &str| -> Result<(), String> {
            let parsed_name = header_name(name)?;
            let parsed_value = header_value(name, value)?;
            // The identity headers come first and win over a producer
            // header of the same name.
            if headers.get(parsed_name.clone()).is_none() {
                header_bytes += name.len() + 2 + value.len() + 2;
                headers.insert(parsed_name, parsed_value);
            }
            Ok(())
        };
        add(&mut headers, MSG_ID_HEADER, &id)?;
        if envelope.format() == Format::CloudEventsBinary {
            let mut failed = None;
            envelope.binary_attributes(event, &NATS, |name, value| {
                // Values are percent-encoded: they always fit.
                if let Err(e) = add(&mut headers, name, value) {
                    failed.get_or_insert(e);
                }
            });
            if let Some(e) = failed {
                return Err(e);
            }
        }
        add(&mut headers, "content-type", envelope.content_type())?;
        for (name, value) in &event.headers {
            if Envelope::forwards(&NATS, name) {
                add(&mut headers, name, value)?;
            }
        }
    }
    let payload = match envelope.format() {
        Format::CloudEventsStructured => Bytes::from(envelope.structured(event)),
        _ => Bytes::from(event.payload.clone()),
    };
    let size = header_bytes + payload.len();
    if size > max_payload {
        return Err(format!(
            "message of {size} bytes ({} of payload, {header_bytes} of headers) is larger than the server's max_payload ({max_payload} bytes)",
            payload.len()
        ));
    }
    Ok(Message {
        subject,
        headers,
        payload,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event() -> Event {
        crate::test_support::event("42", &[("traceparent", "00-ab-01")])
    }

    fn subject(template: &str) -> Template {
        Template::parse("subject", template).unwrap()
    }

    #[test]
    fn carries_the_identity_the_payload_as_stored_and_the_msg_id() {
        let e = event();
        let m = message(
            &e,
            &subject(super::super::config::DEFAULT_SUBJECT),
            1 << 20,
            &Envelope::plain(),
        )
        .unwrap();
        assert_eq!(m.subject, "outbox.order.order.created");
        assert_eq!(&m.payload[..], e.payload.as_bytes());
        let get = |k: &str| {
            let name = HeaderName::from_str(k).unwrap();
            m.headers.get(name).map(|v| v.as_str().to_owned())
        };
        assert_eq!(get(MSG_ID_HEADER), Some(e.id.to_string()));
        for (k, v) in e.message_headers() {
            assert_eq!(get(&k), Some(v), "{k}");
        }
    }

    #[test]
    fn the_topic_override_wins() {
        let mut e = event();
        e.topic = Some("orders.special".into());
        let m = message(&e, &subject("x.{event_type}"), 1 << 20, &Envelope::plain()).unwrap();
        assert_eq!(m.subject, "orders.special");
    }

    #[test]
    fn unsendable_events_are_refused_with_the_reason() {
        let mut e = event();
        e.aggregate_type = "my order".into();
        let why = message(
            &e,
            &subject("outbox.{aggregate_type}"),
            1 << 20,
            &Envelope::plain(),
        )
        .err()
        .unwrap();
        assert!(why.contains("not a valid NATS subject"), "{why}");

        let mut e = event();
        e.headers
            .insert("x-note".into(), "line\r\nX-Injected: 1".into());
        let why = message(&e, &subject("a"), 1 << 20, &Envelope::plain())
            .err()
            .unwrap();
        assert!(
            why.contains("line break") && why.contains("x-note"),
            "{why}"
        );

        let mut e = event();
        e.headers.insert("bad name".into(), "v".into());
        let why = message(&e, &subject("a"), 1 << 20, &Envelope::plain())
            .err()
            .unwrap();
        assert!(why.contains("header name"), "{why}");

        let mut e = event();
        e.payload = "x".repeat(1000);
        let why = message(&e, &subject("a"), 1000, &Envelope::plain())
            .err()
            .unwrap();
        assert!(why.contains("max_payload (1000 bytes)"), "{why}");
    }

    #[test]
    fn a_producer_header_cannot_replace_the_identity() {
        let mut e = event();
        e.headers
            .insert("outbox-event-id".into(), "not-the-id".into());
        e.headers.insert(MSG_ID_HEADER.into(), "forged".into());
        let m = message(&e, &subject("a"), 1 << 20, &Envelope::plain()).unwrap();
        for k in ["outbox-event-id", MSG_ID_HEADER] {
            let name = HeaderName::from_str(k).unwrap();
            assert_eq!(m.headers.get(name).unwrap().as_str(), e.id.to_string());
        }
    }
}
