//! What the endpoint's answers mean: a status as an [`Outcome`], a
//! `Retry-After` as a delay, a client error as a sentence.

use std::time::{Duration, SystemTime};

use outbox::redact::redact_text;
use outbox::Outcome;
use reqwest::StatusCode;

use crate::broker::publisher::push_causes;

/// How much of an answer's body an error quotes.
pub(super) const QUOTED_BODY_BYTES: usize = 200;

/// The outcome of an answer with `status` from `target` (a redacted
/// `POST URL`), given its `Retry-After` and the start of its body.
///
/// * 2xx: delivered;
/// * 408, 425, 429 and 5xx: retried, no sooner than `Retry-After`;
/// * any other 4xx: rejected (dead-lettered at once);
/// * anything else (a redirect, which is not followed): retried, so that
///   an operator can correct the URL before the event is dead-lettered.
pub(super) fn outcome(
    target: &str,
    status: StatusCode,
    retry_after: Option<Duration>,
    body: &[u8],
) -> Outcome {
    if status.is_success() {
        return Outcome::Delivered;
    }
    let mut why = format!("{target} answered {status}");
    if let Some(d) = retry_after {
        why.push_str(&format!(" (Retry-After {} s)", d.as_secs()));
    }
    if status.is_redirection() {
        why.push_str(": redirects are not followed, point url at the final address");
    }
    let quoted = &body[..body.len().min(QUOTED_BODY_BYTES)];
    let text = String::from_utf8_lossy(quoted);
    if !text.trim().is_empty() {
        why.push_str(": ");
        why.push_str(text.trim());
    }
    let why = redact_text(&why);
    let transient = matches!(status.as_u16(), 408 | 425 | 429) || status.is_server_error();
    if status.is_client_error() && !transient {
        return Outcome::Rejected(why);
    }
    match retry_after {
        Some(hint) if transient => Outcome::RetryAfter(why, hint),
        _ => Outcome::Retry(why),
    }
}

/// A `Retry-After` value as a delay from `now`: delta-seconds or an HTTP
/// date (a date in the past is no delay). `None` if it is neither.
pub(super) fn retry_after(value: &str, now: SystemTime) -> Option<Duration> {
    let value = value.trim();
    if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) {
        return Some(Duration::from_secs(value.parse().unwrap_or(u64::MAX)));
    }
    let at = httpdate::parse_http_date(value).ok()?;
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}

/// A request that got no answer, as one line: what was asked, and every
/// cause the client gives (its own copy of the URL left out, since the
/// redacted one leads).
pub(super) fn transport_error(target: &str, e: reqwest::Error, timeout_ms: u64) -> String {
    let timed_out = e.is_timeout();
    let e = e.without_url();
    let mut text = format!("{target} failed: ");
    if timed_out {
        text.push_str(&format!(
            "no complete answer within timeout_ms ({timeout_ms} ms)"
        ));
    } else {
        text.push_str(&e.to_string());
        push_causes(&mut text, &e);
    }
    redact_text(&text)
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: &str = "POST http://h/x";

    #[test]
    fn statuses_map_to_outcomes() {
        let s = |code| StatusCode::from_u16(code).unwrap();
        assert_eq!(outcome(T, s(200), None, b""), Outcome::Delivered);
        assert_eq!(outcome(T, s(204), None, b"ignored"), Outcome::Delivered);
        for code in [408, 425, 429, 500, 502, 503, 504] {
            assert!(
                matches!(outcome(T, s(code), None, b""), Outcome::Retry(_)),
                "{code}"
            );
        }
        match outcome(T, s(429), Some(Duration::from_secs(7)), b"slow down") {
            Outcome::RetryAfter(why, d) => {
                assert_eq!(d, Duration::from_secs(7));
                assert!(why.contains("429") && why.contains("slow down"), "{why}");
            }
            other => panic!("{other:?}"),
        }
        for code in [400, 401, 403, 404, 409, 410, 413, 422] {
            match outcome(T, s(code), Some(Duration::from_secs(1)), b"no") {
                Outcome::Rejected(why) => {
                    assert!(why.contains(&code.to_string()) && why.contains(T), "{why}")
                }
                other => panic!("{code}: {other:?}"),
            }
        }
        assert!(
            matches!(outcome(T, s(301), None, b""), Outcome::Retry(w) if w.contains("redirect"))
        );
    }

    #[test]
    fn rejections_quote_200_bytes_of_the_body_redacted_on_one_line() {
        let body = format!(
            "bad\nrequest postgres://app:hunter2@db/app {}",
            "z".repeat(1_000)
        );
        let Outcome::Rejected(why) = outcome(T, StatusCode::BAD_REQUEST, None, body.as_bytes())
        else {
            panic!()
        };
        assert!(!why.contains("hunter2") && !why.contains('\n'), "{why}");
        assert!(why.contains("400 Bad Request"), "{why}");
        let zs = why.matches('z').count();
        assert!(
            zs > 100 && zs < 200,
            "{zs} of the body's bytes quoted: {why}"
        );
    }

    #[test]
    fn retry_after_is_seconds_or_an_http_date() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        assert_eq!(retry_after("3", now), Some(Duration::from_secs(3)));
        assert_eq!(retry_after(" 0 ", now), Some(Duration::ZERO));
        let date = httpdate::fmt_http_date(now + Duration::from_secs(90));
        assert_eq!(retry_after(&date, now), Some(Duration::from_secs(90)));
        let past = httpdate::fmt_http_date(now - Duration::from_secs(90));
        assert_eq!(retry_after(&past, now), Some(Duration::ZERO));
        assert_eq!(retry_after("soon", now), None);
        assert_eq!(retry_after("-1", now), None);
        assert!(retry_after("99999999999999999999999", now).is_some());
    }
}
