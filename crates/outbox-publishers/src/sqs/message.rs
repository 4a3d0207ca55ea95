//! An event as an SQS/SNS message: body, attributes, group and
//! de-duplication ids, or why it can never be sent; and messages as the
//! entries of a batch call.

use std::collections::BTreeMap;

pub(super) use aws_sdk_sqs::error::BuildError;
use outbox::Event;

use crate::cloudevents;
use crate::Envelope;

/// The most message attributes the services carry on one message.
pub const MAX_ATTRIBUTES: usize = 10;

/// The attribute that carries, as one JSON object, the headers that do not
/// fit in attributes of their own (beyond the 10-attribute limit, or whose
/// name or value SQS does not accept as an attribute).
pub const OVERFLOW_ATTRIBUTE: &str = "outbox-headers";

/// The data type every attribute is sent with.
pub(super) const STRING: &str = "String";

/// A message ready to send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Message {
    /// The payload's JSON text, as stored.
    pub(super) body: String,
    /// (name, value), all of data type `String`.
    pub(super) attributes: Vec<(String, String)>,
    /// FIFO only: the aggregate id (escaped if needed).
    pub(super) group_id: Option<String>,
    /// FIFO only: the event id.
    pub(super) dedup_id: Option<String>,
    /// What the service counts against its size limit.
    pub(super) size: usize,
}

/// Whether `name` can be an attribute name: `[A-Za-z0-9_.-]`, up to 256
/// characters, no `..`, not starting or ending with `.`, not starting with
/// `AWS.` or `Amazon.`.
fn valid_name(name: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    !name.is_empty()
        && name.len() <= 256
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
        && !name.contains("..")
        && !name.starts_with('.')
        && !name.ends_with('.')
        && !lower.starts_with("aws.")
        && !lower.starts_with("amazon.")
}

/// Whether `value` can be a `String` attribute value: not empty, only the
/// characters the services accept (XML's).
fn valid_value(value: &str) -> bool {
    !value.is_empty()
        && value.chars().all(|c| {
            matches!(c, '\t' | '\n' | '\r' | '\u{20}'..='\u{D7FF}' | '\u{E000}'..='\u{FFFD}')
                || c >= '\u{10000}'
        })
}

/// The aggregate id as a `MessageGroupId` (ASCII 33 to 126, up to 128
/// characters): as is if it is one; otherwise every byte outside that range,
/// and `%`, percent-encoded (`order 7` → `order%207`). `None` if even that
/// is longer than 128 characters.
pub(super) fn group_id(aggregate_id: &str) -> Option<String> {
    let plain = |b: u8| (33..=126).contains(&b);
    let id = if aggregate_id.bytes().all(plain) && !aggregate_id.is_empty() {
        aggregate_id.to_owned()
    } else {
        let mut out = String::with_capacity(aggregate_id.len() * 3);
        for b in aggregate_id.bytes() {
            if plain(b) && b != b'%' {
                out.push(b as char);
            } else {
                out.push_str(&format!("%{b:02X}"));
            }
        }
        if out.is_empty() {
            out.push_str("%00");
        }
        out
    };
    (id.len() <= 128).then_some(id)
}

/// The attributes beside the body, before the limits: in plain format the
/// identity headers and the producer's; with a CloudEvents envelope (always
/// structured: the services have no CloudEvents binding) `content-type`
/// and the producer's headers (`traceparent` among them, which tracing
/// instrumentations read from the message attributes) but those that could
/// pass for CloudEvents headers (`ce-…`, `ce_…`, any case).
fn headers(event: &Event, envelope: &Envelope) -> Vec<(String, String)> {
    if envelope.is_plain() {
        return event.message_headers();
    }
    let mut out = vec![(
        "content-type".to_owned(),
        cloudevents::STRUCTURED_CONTENT_TYPE.to_owned(),
    )];
    for (name, value) in &event.headers {
        if Envelope::forwards(&cloudevents::HTTP, name)
            && Envelope::forwards(&cloudevents::KAFKA, name)
        {
            out.push((name.clone(), value.clone()));
        }
    }
    out
}

/// The message for `event` in `envelope`'s format, or why it can never be
/// sent.
///
/// Attributes ([`headers`]; the identity headers come first and win over a
/// producer header of the same name), each its own `String` attribute
/// while there are at most [`MAX_ATTRIBUTES`] of them and the service
/// accepts each name and value. Otherwise the first nine that it accepts
/// are attributes of their own and all the others go, as one JSON object,
/// into [`OVERFLOW_ATTRIBUTE`]: nothing is dropped.
pub(super) fn message(
    event: &Event,
    envelope: &Envelope,
    fifo: bool,
    max_bytes: usize,
) -> Result<Message, String> {
    let body = if envelope.is_plain() {
        event.payload.clone()
    } else {
        // Strings and valid JSON: always UTF-8.
        String::from_utf8(envelope.structured(event)).expect("a CloudEvent is UTF-8")
    };
    let mut seen = std::collections::HashSet::new();
    let mut fit: Vec<(String, String)> = Vec::new();
    let mut rest: BTreeMap<String, String> = BTreeMap::new();
    for (name, value) in headers(event, envelope) {
        if !seen.insert(name.clone()) {
            continue;
        }
        if valid_name(&name) && valid_value(&value) && name != OVERFLOW_ATTRIBUTE {
            fit.push((name, value));
        } else {
            rest.insert(name, value);
        }
    }
    let attributes = if rest.is_empty() && fit.len() <= MAX_ATTRIBUTES {
        fit
    } else {
        let mut own: Vec<(String, String)> = fit;
        for (name, value) in own.split_off((MAX_ATTRIBUTES - 1).min(own.len())) {
            rest.insert(name, value);
        }
        let json = serde_json::to_string(&rest).unwrap_or_else(|_| "{}".to_owned());
        own.push((OVERFLOW_ATTRIBUTE.to_owned(), json));
        own
    };
    let size = body.len()
        + attributes
            .iter()
            .map(|(n, v)| n.len() + STRING.len() + v.len())
            .sum::<usize>();
    if size > max_bytes {
        return Err(format!(
            "message of {size} bytes ({} of payload) is larger than max_message_bytes ({max_bytes})",
            event.payload.len()
        ));
    }
    if event.payload.is_empty() {
        return Err("the payload is empty, and the services refuse an empty message".to_owned());
    }
    let (group_id, dedup_id) = if fifo {
        let Some(group) = group_id(&event.aggregate_id) else {
            return Err(format!(
                "aggregate id {:?} cannot be a MessageGroupId (more than 128 characters once its bytes outside ASCII 33-126 are percent-encoded)",
                outbox::redact::shorten(&event.aggregate_id, 60)
            ));
        };
        (Some(group), Some(event.id.to_string()))
    } else {
        (None, None)
    };
    Ok(Message {
        body,
        attributes,
        group_id,
        dedup_id,
        size,
    })
}

/// `fn $name(messages) -> Result<Vec<$entry>, BuildError>`: the entries
/// of one batch call for `messages`, each entry's id its position in
/// `messages`, with the body (set by `$body`), the group and
/// de-duplication ids, and every attribute as a `String` `$attribute`.
/// The services' builders differ in type and in the name of the body, not
/// in what they are given.
macro_rules! entries_fn {
    ($(#[$doc:meta])* $name:ident: $entry:ty, $attribute:ty, $body:ident) => {
        $(#[$doc])*
        pub(super) fn $name(messages: &[(usize, Message)]) -> Result<Vec<$entry>, BuildError> {
            let mut entries = Vec::with_capacity(messages.len());
            for (n, (_, m)) in messages.iter().enumerate() {
                let mut b = <$entry>::builder()
                    .id(n.to_string())
                    .$body(&m.body)
                    .set_message_group_id(m.group_id.clone())
                    .set_message_deduplication_id(m.dedup_id.clone());
                for (name, value) in &m.attributes {
                    let v = <$attribute>::builder()
                        .data_type(STRING)
                        .string_value(value)
                        .build()?;
                    b = b.message_attributes(name, v);
                }
                entries.push(b.build()?);
            }
            Ok(entries)
        }
    };
}

entries_fn! {
    /// The `SendMessageBatch` entries of `messages`.
    sqs_entries: aws_sdk_sqs::types::SendMessageBatchRequestEntry,
        aws_sdk_sqs::types::MessageAttributeValue, message_body
}

entries_fn! {
    /// The `PublishBatch` entries of `messages`.
    sns_entries: aws_sdk_sns::types::PublishBatchRequestEntry,
        aws_sdk_sns::types::MessageAttributeValue, message
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(headers: &[(&str, &str)]) -> Event {
        crate::test_support::event("order-1", headers)
    }

    #[test]
    fn identity_and_producer_headers_are_attributes_and_the_body_is_as_stored() {
        let e = event(&[("traceparent", "00-ab-01"), ("x-tenant", "acme")]);
        let m = message(&e, &Envelope::plain(), true, 262_144).unwrap();
        assert_eq!(m.body, r#"{"n": 1e400}"#);
        let names: Vec<&str> = m.attributes.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            [
                "outbox-event-id",
                "outbox-event-type",
                "outbox-aggregate-type",
                "outbox-aggregate-id",
                "traceparent",
                "x-tenant"
            ]
        );
        assert_eq!(m.group_id.as_deref(), Some("order-1"));
        assert_eq!(m.dedup_id, Some(e.id.to_string()));
        let m = message(&e, &Envelope::plain(), false, 262_144).unwrap();
        assert_eq!((m.group_id, m.dedup_id), (None, None));
    }

    #[test]
    fn headers_beyond_the_limit_or_refused_names_go_into_one_json_attribute() {
        let many: Vec<(String, String)> =
            (0..8).map(|i| (format!("h{i}"), format!("v{i}"))).collect();
        let mut pairs: Vec<(&str, &str)> =
            many.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        pairs.push(("bad name", "x"));
        pairs.push(("empty", ""));
        pairs.push(("AWS.trace", "t"));
        let m = message(&event(&pairs), &Envelope::plain(), false, 262_144).unwrap();
        assert_eq!(m.attributes.len(), MAX_ATTRIBUTES);
        let (last, json) = m.attributes.last().unwrap();
        assert_eq!(last, OVERFLOW_ATTRIBUTE);
        let rest: BTreeMap<String, String> = serde_json::from_str(json).unwrap();
        let mut all: BTreeMap<String, String> = m.attributes[..9].iter().cloned().collect();
        all.extend(rest);
        for (k, v) in pairs {
            assert_eq!(all.get(k).map(String::as_str), Some(v), "{k}");
        }
        // Exactly ten valid ones need no overflow.
        let six: Vec<(String, String)> =
            (0..6).map(|i| (format!("h{i}"), "v".to_owned())).collect();
        let pairs: Vec<(&str, &str)> = six.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        let m = message(&event(&pairs), &Envelope::plain(), false, 262_144).unwrap();
        assert_eq!(m.attributes.len(), 10);
        assert!(m.attributes.iter().all(|(n, _)| n != OVERFLOW_ATTRIBUTE));
    }

    #[test]
    fn too_large_and_unusable_group_ids_are_refused() {
        let mut e = event(&[]);
        e.payload = format!("\"{}\"", "x".repeat(2_000));
        let why = message(&e, &Envelope::plain(), false, 1_024).unwrap_err();
        assert!(why.contains("max_message_bytes (1024)"), "{why}");
        assert_eq!(group_id("order 7%").as_deref(), Some("order%207%25"));
        assert_eq!(group_id("é").as_deref(), Some("%C3%A9"));
        assert_eq!(group_id(&"é".repeat(30)), None);
        let mut e = event(&[]);
        e.aggregate_id = "é".repeat(30);
        assert!(message(&e, &Envelope::plain(), true, 262_144)
            .unwrap_err()
            .contains("MessageGroupId"));
        assert!(message(&e, &Envelope::plain(), false, 262_144).is_ok());
    }

    #[test]
    fn cloudevents_formats_send_one_structured_cloudevent_with_the_producers_other_headers() {
        use crate::Format;
        let e = event(&[
            (
                "traceparent",
                "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            ),
            ("x-tenant", "acme"),
            ("ce-type", "forged"),
            ("CE_id", "forged"),
        ]);
        for format in [Format::CloudEventsBinary, Format::CloudEventsStructured] {
            let envelope = Envelope::new(format, "/outbox/public");
            let m = message(&e, &envelope, true, 262_144).unwrap();
            assert_eq!(m.body.as_bytes(), envelope.structured(&e).as_slice());
            // The payload (`1e400`) embedded as stored, never re-parsed.
            assert!(
                m.body.contains(&format!("\"id\":\"{}\"", e.id)),
                "{}",
                m.body
            );
            assert!(m.body.ends_with(r#""data":{"n": 1e400}}"#), "{}", m.body);
            assert_eq!(
                m.attributes,
                [
                    (
                        "content-type".to_owned(),
                        "application/cloudevents+json".to_owned()
                    ),
                    ("traceparent".to_owned(), e.headers["traceparent"].clone()),
                    ("x-tenant".to_owned(), "acme".to_owned()),
                ]
            );
            assert_eq!(
                m.size,
                m.body.len()
                    + m.attributes
                        .iter()
                        .map(|(n, v)| n.len() + STRING.len() + v.len())
                        .sum::<usize>()
            );
            assert_eq!(m.group_id.as_deref(), Some("order-1"));
        }
    }

    #[test]
    fn each_message_becomes_an_entry_named_by_its_position_with_string_attributes() {
        let e = event(&[("x-tenant", "acme")]);
        let m = message(&e, &Envelope::plain(), true, 262_144).unwrap();
        let sqs = sqs_entries(&[(7, m.clone()), (9, m.clone())]).unwrap();
        assert_eq!((sqs[0].id(), sqs[1].id()), ("0", "1"));
        assert_eq!(sqs[0].message_body(), m.body);
        assert_eq!(sqs[0].message_group_id(), Some("order-1"));
        assert_eq!(
            sqs[0].message_deduplication_id(),
            Some(e.id.to_string().as_str())
        );
        let tenant = &sqs[0].message_attributes().unwrap()["x-tenant"];
        assert_eq!(
            (tenant.data_type(), tenant.string_value()),
            (STRING, Some("acme"))
        );
        let sns = sns_entries(&[(7, m.clone())]).unwrap();
        assert_eq!((sns[0].id(), sns[0].message()), ("0", m.body.as_str()));
        assert_eq!(sns[0].message_group_id(), Some("order-1"));
        let tenant = &sns[0].message_attributes().unwrap()["x-tenant"];
        assert_eq!(
            (tenant.data_type(), tenant.string_value()),
            (STRING, Some("acme"))
        );
    }
}
