//! An event as an HTTP request: where it goes (the URL template filled in)
//! and its headers, or why it can never be sent.

use outbox::redact::{redact_text, shorten};
use outbox::Event;
use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use reqwest::Url;

use crate::cloudevents::{Format, HTTP};
use crate::template::{Piece, Template};
use crate::Envelope;

/// Everything but RFC 3986's unreserved characters is escaped in a value
/// filled into the URL, so a value stays one path segment (or one query
/// value) and can never change the host or add a path.
const SEGMENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// Headers the publisher sets itself: no `[publisher.http] headers` entry
/// and no producer header may use these names.
const RESERVED: &[&str] = &[
    "content-type",
    "content-length",
    "content-encoding",
    "transfer-encoding",
    "connection",
    "keep-alive",
    "proxy-connection",
    "upgrade",
    "te",
    "trailer",
    "host",
    "expect",
    "webhook-id",
    "webhook-timestamp",
    "webhook-signature",
    "outbox-event-id",
    "outbox-event-type",
    "outbox-aggregate-type",
    "outbox-aggregate-id",
    "outbox-topic",
];

/// Whether the publisher sets header `name` itself (any case).
pub(crate) fn reserved_header(name: &str) -> bool {
    RESERVED.iter().any(|r| r.eq_ignore_ascii_case(name))
}

/// The `url` setting: a [`Template`] whose values are filled in
/// percent-encoded, one path segment (or query value) each.
#[derive(Debug, Clone)]
pub(crate) struct UrlTemplate {
    template: Template,
    /// The URL up to its first placeholder: what the health check asks.
    base: Url,
}

impl UrlTemplate {
    /// Parses `raw`; the error is the fix.
    pub(crate) fn parse(raw: &str) -> Result<UrlTemplate, String> {
        let lower = raw.get(..8).unwrap_or(raw).to_ascii_lowercase();
        let Some(scheme_len) = ["http://", "https://"]
            .iter()
            .find(|s| lower.starts_with(**s))
            .map(|s| s.len())
        else {
            return Err(
                "must start with http:// or https://, e.g. https://hooks.example.com/outbox".into(),
            );
        };
        let authority_end = raw[scheme_len..]
            .find(['/', '?', '#'])
            .map_or(raw.len(), |i| i + scheme_len);
        if raw[..authority_end].contains(['{', '}']) {
            return Err("placeholders may stand in the path or the query, not in the host".into());
        }
        let template = Template::parse_url("url", raw).map_err(|e| e.to_string())?;
        let sample = template.sample("x");
        let parsed = Url::parse(&sample)
            .map_err(|e| format!("cannot be parsed ({e}); use http[s]://HOST[:PORT]/PATH"))?;
        if parsed.host_str().is_none_or(str::is_empty) {
            return Err("names no host; use http[s]://HOST[:PORT]/PATH".into());
        }
        let base_text = if template.is_literal() {
            sample
        } else {
            template.prefix().to_owned()
        };
        let base = Url::parse(&base_text).unwrap_or(parsed);
        Ok(UrlTemplate { template, base })
    }

    /// The URL for `event`, or why it cannot have one (a missing header, or
    /// a value that would be an empty, `.` or `..` path segment).
    pub(crate) fn url_for(&self, event: &Event) -> Result<Url, String> {
        if self.template.is_literal() {
            return Ok(self.base.clone());
        }
        let mut out = String::new();
        let mut in_query = false;
        self.template.try_for_each(event, |piece| {
            match piece {
                Piece::Literal(text) => {
                    in_query |= text.contains('?');
                    out.push_str(text);
                }
                Piece::Value { name, value } => {
                    if !in_query && matches!(value, "" | "." | "..") {
                        return Err(format!(
                            "the {name} {value:?} cannot be a URL path segment ({{{name}}} in url)"
                        ));
                    }
                    out.extend(utf8_percent_encode(value, SEGMENT));
                }
            }
            Ok(())
        })?;
        Url::parse(&out).map_err(|e| format!("the event's URL cannot be built: {e}"))
    }

    /// The URL up to its first placeholder.
    pub(crate) fn base(&self) -> &Url {
        &self.base
    }
}

/// `name` as a message may show it.
fn shown_name(name: &str) -> String {
    format!("{:?}", shorten(&redact_text(name), 60))
}

/// The headers of `event`'s request, after `statics` (the configured
/// ones): the four identity headers, `outbox-topic` for a topic override,
/// then the producer's headers. A header HTTP cannot carry as stored makes
/// the event a rejection naming it (values are not quoted: they may be
/// secret).
pub(crate) fn event_headers(event: &Event, statics: &HeaderMap) -> Result<HeaderMap, String> {
    let mut headers = statics.clone();
    let id = event.id.to_string();
    let topic = event.topic.as_deref().map(|t| ("outbox-topic", t));
    for (name, value) in event.identity_headers(&id).into_iter().chain(topic) {
        // The names are known good: only the value is checked.
        headers.append(HeaderName::from_static(name), checked_value(name, value)?);
    }
    for (name, value) in &event.headers {
        let (header, value) = checked(name, value, true, statics)?;
        headers.append(header, value);
    }
    Ok(headers)
}

/// The headers of `event`'s request in a CloudEvents `envelope`, after
/// `statics`: in binary mode the `ce-*` attributes (values
/// percent-encoded), then the producer's headers but for ones named
/// `ce-…`. `Content-Type` is set when sending.
pub(crate) fn cloudevent_headers(
    event: &Event,
    statics: &HeaderMap,
    envelope: &Envelope,
) -> Result<HeaderMap, String> {
    let mut headers = statics.clone();
    if envelope.format() == Format::CloudEventsBinary {
        envelope.binary_attributes(event, &HTTP, |name, value| {
            // Lowercase names and percent-encoded values: always valid.
            if let Ok(value) = HeaderValue::from_str(value) {
                headers.append(HeaderName::from_static(name), value);
            }
        });
    }
    for (name, value) in &event.headers {
        if Envelope::forwards(&HTTP, name) {
            let (header, value) = checked(name, value, true, statics)?;
            headers.append(header, value);
        }
    }
    Ok(headers)
}

/// Header `name: value` as HTTP carries it, or why it cannot be sent; a
/// `producer` header may not take a name the publisher sets itself.
fn checked(
    name: &str,
    value: &str,
    producer: bool,
    statics: &HeaderMap,
) -> Result<(HeaderName, HeaderValue), String> {
    let Ok(header) = HeaderName::from_bytes(name.as_bytes()) else {
        return Err(format!(
            "header name {} is not a valid HTTP header name (a token: letters, digits and !#$%&'*+-.^_`|~, no spaces)",
            shown_name(name)
        ));
    };
    if producer && (reserved_header(name) || statics.contains_key(&header)) {
        return Err(format!(
            "header {} is one the http publisher sets itself (signature, identity, content or [publisher.http] headers); rename it",
            shown_name(name)
        ));
    }
    Ok((header, checked_value(name, value)?))
}

/// The value of header `name` as HTTP carries it, or why it cannot be sent.
fn checked_value(name: &str, value: &str) -> Result<HeaderValue, String> {
    let Ok(value_ok) = HeaderValue::from_bytes(value.as_bytes()) else {
        return Err(format!(
            "header {} has a value HTTP cannot carry (a line break or another control character)",
            shown_name(name)
        ));
    };
    if value.trim_matches([' ', '\t']) != value {
        return Err(format!(
            "header {} has a value with leading or trailing spaces, which HTTP would remove",
            shown_name(name)
        ));
    }
    Ok(value_ok)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event() -> Event {
        crate::test_support::event("42", &[])
    }

    #[test]
    fn placeholders_fill_one_encoded_segment_each() {
        let t = UrlTemplate::parse("http://h:8080/hooks/{topic}?a={aggregate_type}").unwrap();
        assert_eq!(t.base().as_str(), "http://h:8080/hooks/");
        let mut e = event();
        assert_eq!(
            t.url_for(&e).unwrap().as_str(),
            "http://h:8080/hooks/order.created?a=order"
        );
        e.topic = Some("../../admin?x=1#f".into());
        e.aggregate_type = "a b/é".into();
        assert_eq!(
            t.url_for(&e).unwrap().as_str(),
            "http://h:8080/hooks/..%2F..%2Fadmin%3Fx%3D1%23f?a=a%20b%2F%C3%A9"
        );
        e.topic = Some("..".into());
        assert!(t.url_for(&e).unwrap_err().contains("path segment"));
        let plain = UrlTemplate::parse("https://h/x").unwrap();
        assert_eq!(plain.url_for(&e).unwrap().as_str(), "https://h/x");
    }

    #[test]
    fn headers_http_cannot_carry_reject_the_event_naming_them() {
        let statics = HeaderMap::new();
        let mut e = event();
        e.headers.insert("traceparent".into(), "00-ab-01".into());
        e.headers.insert("x-uni".into(), "é😀".into());
        e.headers.insert("x-tab".into(), "a\tb".into());
        let h = event_headers(&e, &statics).unwrap();
        assert_eq!(h["outbox-event-id"], e.id.to_string().as_str());
        assert_eq!(h["x-uni"].as_bytes(), "é😀".as_bytes());
        assert!(!h.contains_key("outbox-topic"));
        e.topic = Some("orders".into());
        assert_eq!(
            event_headers(&e, &statics).unwrap()["outbox-topic"],
            "orders"
        );
        for (name, value, why) in [
            ("x-nl", "a\nb", "cannot carry"),
            ("bad name", "x", "not a valid"),
            ("webhook-signature", "v1,forged", "sets itself"),
            ("x-pad", "x ", "trailing"),
        ] {
            let mut e = event();
            e.headers.insert(name.into(), value.into());
            let why_not = event_headers(&e, &statics).unwrap_err();
            assert!(why_not.contains(why) && why_not.contains(name), "{why_not}");
        }
        let mut e = event();
        e.aggregate_id = "line\nbreak".into();
        assert!(event_headers(&e, &statics)
            .unwrap_err()
            .contains("outbox-aggregate-id"));
    }
}
