//! What the reader admits from the slot. Any role that may call
//! `pg_logical_emit_message` (PUBLIC, unless revoked) can write a message
//! with the outbox's prefix without going through `outbox_emit`, so every
//! decoded message is checked as the table's constraints would check its
//! row ([`check`], pure), and its id against the ids read since the slot
//! was last confirmed ([`Admission`]). Nothing that fails is published:
//!
//! - what the table could not store at all (a name longer than its
//!   `varchar`, a NUL character, a payload `jsonb` refuses, text that is
//!   not UTF-8, a message `outbox_emit` did not write, a second message
//!   with an id already read) is a [`Refusal`]: the reader logs one error
//!   line naming the rule and the fix and counts it
//!   (`refused_messages`), and the slot moves past it;
//! - what a row could hold (headers that are not a JSON object, a
//!   `created_at` no server clock wrote) is a dead letter with the reason
//!   ([`Checked::dead`]), stored through the set-aside path.
//!
//! Everything admitted can also be stored as a row, which the set-aside
//! path needs for any event whose publish fails.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};

use crate::event::{MAX_NAME_CHARS, MAX_TOPIC_CHARS};
use crate::relay::decode;
use crate::wal::message::Emitted;

mod admission;
mod payload;

pub(crate) use admission::Admission;
use payload::payload;

/// 2000-01-01T00:00:00Z in µs since 1970: the earliest `created_at`
/// admitted. `outbox_emit` writes the server's `now()`, and no server
/// running PostgreSQL 15 has a clock before 2000; a time before it is a
/// forged or garbage value (1970 is what a zero decodes to).
pub(crate) const EARLIEST_CREATED_AT_MICROS: i64 = 946_684_800_000_000;

/// How far past the relay's clock a `created_at` may be: a day. The
/// server's clock and the relay's differ by seconds, not days; a time a
/// day ahead is no server's `now()`. A fixed calendar bound would expire;
/// this one follows the relay's clock.
pub(crate) const CREATED_AT_AHEAD_MICROS: i64 = 86_400_000_000;

/// Why a message is refused: no row could hold it, so it is logged,
/// counted and skipped, never published.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// The content is not UTF-8 text.
    NotUtf8(String),
    /// The content is not what `outbox_emit` writes.
    Malformed(String),
    /// A name or the topic is longer than its column.
    TooLong {
        field: &'static str,
        chars: usize,
        max: usize,
        start: String,
    },
    /// A name or the topic holds a NUL character, which `text` cannot.
    Nul { field: &'static str },
    /// The payload is not JSON.
    PayloadNotJson(String),
    /// The payload is JSON that `jsonb` refuses.
    PayloadNotJsonb(&'static str),
    /// A second message with an id already read since the slot was last
    /// confirmed, with other contents.
    DuplicateId,
    /// Written outside any transaction (`pg_logical_emit_message(false,
    /// …)`): not tied to a commit, so not an event.
    NotTransactional,
}

impl Refusal {
    /// The rule, as one word for logs and metrics.
    pub(crate) fn rule(&self) -> &'static str {
        match self {
            Refusal::NotUtf8(_) => "utf8",
            Refusal::Malformed(_) => "format",
            Refusal::TooLong { .. } => "length",
            Refusal::Nul { .. } => "nul",
            Refusal::PayloadNotJson(_) | Refusal::PayloadNotJsonb(_) => "payload",
            Refusal::DuplicateId => "duplicate_id",
            Refusal::NotTransactional => "not_transactional",
        }
    }

    /// What the operator can do about it.
    pub(crate) fn fix(&self) -> &'static str {
        match self {
            Refusal::DuplicateId => {
                "an event id is used once: a producer that passes its own id to outbox_emit must not reuse it"
            }
            _ => {
                "only outbox_emit should write messages with this prefix: revoke EXECUTE on pg_logical_emit_message from PUBLIC (docs/operations.md, \"Who may publish in the WAL mode\")"
            }
        }
    }
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refusal::NotUtf8(e) => write!(f, "the message is not UTF-8 text ({e})"),
            Refusal::Malformed(e) => write!(f, "outbox_emit did not write this message ({e})"),
            Refusal::TooLong {
                field,
                chars,
                max,
                start,
            } => write!(
                f,
                "{field} {start:?}… has {chars} characters; the column holds at most {max}"
            ),
            Refusal::Nul { field } => write!(
                f,
                "{field} holds a NUL character, which PostgreSQL text cannot store"
            ),
            Refusal::PayloadNotJson(e) => write!(f, "the payload is not JSON ({e})"),
            Refusal::PayloadNotJsonb(why) => {
                write!(f, "the payload is JSON that jsonb refuses: {why}")
            }
            Refusal::DuplicateId => write!(
                f,
                "a message with this event id and other contents was already read (the table refuses a second row with one id)"
            ),
            Refusal::NotTransactional => write!(
                f,
                "the message was written outside a transaction (pg_logical_emit_message(false, ...)), so no commit stands behind it; outbox_emit writes transactional ones"
            ),
        }
    }
}

/// A message the table could store: its headers, and whether it goes
/// straight to the dead letters instead of the broker.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Checked {
    /// The headers, decoded as the table mode decodes them; empty when
    /// they are the reason for [`Checked::dead`].
    pub headers: BTreeMap<String, String>,
    /// `None` when it is not a time a server wrote: stored as the time
    /// the relay read it, and [`Checked::dead`] says what it was.
    pub created_at: Option<DateTime<Utc>>,
    /// Why it is dead-lettered without being published; `None`: publish.
    pub dead: Option<String>,
}

/// Checks one decoded message as the table would check its row:
/// `aggregate_type`, `aggregate_id` and `event_type` at most 100
/// characters, the topic at most 255 (as the table, not the library,
/// counts them: characters, and an empty one is accepted, as the table and
/// `outbox_emit` accept it), none holding a NUL; the payload JSON that
/// `jsonb` accepts; the headers a JSON object of values the table mode
/// decodes; `created_at` from [`EARLIEST_CREATED_AT_MICROS`] to
/// `not_after_micros` (the relay's clock plus
/// [`CREATED_AT_AHEAD_MICROS`]). The first two kinds are refused, the last
/// two dead-lettered.
pub(crate) fn check(m: &Emitted<'_>, not_after_micros: i64) -> Result<Checked, Refusal> {
    for (field, value) in [
        ("aggregate_type", m.aggregate_type),
        ("aggregate_id", m.aggregate_id),
        ("event_type", m.event_type),
    ] {
        text_column(field, value, MAX_NAME_CHARS)?;
    }
    if let Some(topic) = m.topic {
        text_column("topic", topic, MAX_TOPIC_CHARS)?;
    }
    payload(m.payload)?;
    let mut dead = None;
    let headers = match decode::headers(m.headers) {
        Ok(h) if !h.iter().any(|(k, v)| k.contains('\0') || v.contains('\0')) => h,
        Ok(_) => {
            dead = Some(
                "headers hold a NUL character, which the table cannot store; stored without headers"
                    .to_owned(),
            );
            BTreeMap::new()
        }
        Err(_) => {
            dead = Some(format!(
                "headers {:?} are not a JSON object (the table's check outbox_events_headers_object); stored without headers",
                prefix_of(m.headers, 60)
            ));
            BTreeMap::new()
        }
    };
    let micros = m.created_at_micros;
    let created_at = if (EARLIEST_CREATED_AT_MICROS..=not_after_micros).contains(&micros) {
        DateTime::from_timestamp_micros(micros)
    } else {
        None
    };
    if created_at.is_none() {
        let shown = DateTime::from_timestamp_micros(micros)
            .map(|t| t.to_rfc3339())
            .unwrap_or_else(|| "beyond any calendar".to_owned());
        let why = format!(
            "created_at is {micros} µs since 1970 ({shown}), not a time outbox_emit writes (from 2000-01-01 to a day past the relay's clock); stored with the time the relay read it"
        );
        dead = Some(match dead {
            Some(first) => format!("{first}; {why}"),
            None => why,
        });
    }
    Ok(Checked {
        headers,
        created_at,
        dead,
    })
}

/// A `varchar(max)` column's check, as PostgreSQL counts: characters.
fn text_column(field: &'static str, value: &str, max: usize) -> Result<(), Refusal> {
    // A character is at least one byte: most values end here.
    if value.len() > max {
        let chars = value.chars().count();
        if chars > max {
            return Err(Refusal::TooLong {
                field,
                chars,
                max,
                start: prefix_of(value, 20).to_owned(),
            });
        }
    }
    if value.as_bytes().contains(&0) {
        return Err(Refusal::Nul { field });
    }
    Ok(())
}

/// At most `n` characters of `s`, for an error line.
fn prefix_of(s: &str, n: usize) -> &str {
    match s.char_indices().nth(n) {
        Some((at, _)) => &s[..at],
        None => s,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wal::message::decode;
    use uuid::Uuid;

    const ID: &str = "0190f3c2-7a4b-7c3d-8e9f-0123456789ab";
    /// 2024-12-06T19:12:25Z.
    const NOW: i64 = 1_733_512_345_123_456;

    fn good() -> Emitted<'static> {
        Emitted {
            id: Uuid::parse_str(ID).unwrap(),
            created_at_micros: NOW,
            aggregate_type: "order",
            aggregate_id: "42",
            event_type: "order.created",
            topic: None,
            headers: r#"{"traceparent": "00-abc-01"}"#,
            payload: r#"{"n": 1, "s": "é"}"#,
        }
    }

    fn refused(m: &Emitted<'_>) -> Refusal {
        check(m, NOW + CREATED_AT_AHEAD_MICROS).unwrap_err()
    }

    fn dead(m: &Emitted<'_>) -> String {
        let c = check(m, NOW + CREATED_AT_AHEAD_MICROS).unwrap();
        c.dead.expect("dead-lettered")
    }

    #[test]
    fn what_outbox_emit_writes_passes_with_its_headers() {
        let c = check(&good(), NOW + CREATED_AT_AHEAD_MICROS).unwrap();
        assert_eq!(c.dead, None);
        assert_eq!(c.headers["traceparent"], "00-abc-01");
        assert_eq!(c.created_at.unwrap().timestamp_micros(), NOW);
    }

    #[test]
    fn names_are_counted_in_characters_up_to_100_and_an_empty_one_passes_as_in_the_table() {
        let hundred = "é".repeat(100); // 200 bytes, 100 characters
        let long = "x".repeat(101);
        for field in ["aggregate_type", "aggregate_id", "event_type"] {
            let set = |m: &mut Emitted<'static>, v: &'static str| match field {
                "aggregate_type" => m.aggregate_type = v,
                "aggregate_id" => m.aggregate_id = v,
                _ => m.event_type = v,
            };
            let mut m = good();
            set(&mut m, hundred.clone().leak());
            assert!(check(&m, NOW + 1).is_ok(), "{field}: 100 characters pass");
            set(&mut m, "");
            assert!(check(&m, NOW + 1).is_ok(), "{field}: the table accepts ''");
            set(&mut m, long.clone().leak());
            let r = refused(&m);
            assert!(
                matches!(r, Refusal::TooLong { field: f, chars: 101, max: 100, .. } if f == field),
                "{r:?}"
            );
            let line = r.to_string();
            assert!(
                line.contains(field) && line.contains("101 characters"),
                "{line}"
            );
            set(&mut m, "a\0b");
            assert_eq!(refused(&m), Refusal::Nul { field });
        }
    }

    #[test]
    fn the_topic_is_at_most_255_characters() {
        let mut m = good();
        m.topic = Some("ü".repeat(255).leak());
        assert!(check(&m, NOW + 1).is_ok());
        m.topic = Some("t".repeat(1_000).leak());
        assert!(matches!(
            refused(&m),
            Refusal::TooLong {
                field: "topic",
                chars: 1_000,
                max: 255,
                ..
            }
        ));
    }

    #[test]
    fn headers_that_are_not_an_object_or_hold_a_nul_are_dead_lettered_without_them() {
        for bad in ["[1, 2]", "\"x\"", "null", "{\"a\": 1"] {
            let mut m = good();
            m.headers = bad;
            let c = check(&m, NOW + 1).unwrap();
            assert!(c.headers.is_empty());
            let why = c.dead.unwrap();
            assert!(
                why.contains("not a JSON object") && why.contains(&format!("{bad:?}")),
                "{why}"
            );
        }
        let mut m = good();
        m.headers = r#"{"a": "x\u0000y"}"#;
        assert!(dead(&m).contains("NUL"));
        // Any value the table mode decodes passes: numbers, objects, nulls.
        m.headers = r#"{"n": 1e400, "o": {"k": [1]}, "z": null}"#;
        assert_eq!(check(&m, NOW + 1).unwrap().dead, None);
    }

    #[test]
    fn a_created_at_before_2000_or_a_day_past_the_relays_clock_is_dead_lettered() {
        let not_after = NOW + CREATED_AT_AHEAD_MICROS;
        for (micros, passes) in [
            (EARLIEST_CREATED_AT_MICROS, true),
            (EARLIEST_CREATED_AT_MICROS - 1, false),
            (0, false),
            (-5, false),
            (not_after, true),
            (not_after + 1, false),
            (i64::MAX, false),
            (i64::MIN, false),
        ] {
            let mut m = good();
            m.created_at_micros = micros;
            let c = check(&m, not_after).unwrap();
            assert_eq!(c.created_at.is_some(), passes, "{micros}");
            assert_eq!(c.dead.is_none(), passes, "{micros}");
            if !passes {
                assert!(c.dead.unwrap().contains(&micros.to_string()));
            }
        }
        // Both flaws are named.
        let mut m = good();
        m.headers = "[]";
        m.created_at_micros = -1;
        let why = dead(&m);
        assert!(
            why.contains("headers") && why.contains("created_at"),
            "{why}"
        );
    }

    /// The check's cost per event, printed (not asserted: machines vary):
    /// `cargo test -p outbox --release --lib check_cost -- --nocapture`.
    /// A payload as `jsonb` prints it, and the same with an escape (which
    /// makes the check walk it for what `jsonb` refuses).
    #[test]
    fn check_cost() {
        let plain = r#"{"note": "leave at the door é", "lines": [{"qty": 2, "sku": "A-1", "price": 4999}, {"qty": 1, "sku": "B-7", "price": 3001}], "currency": "EUR", "customer": "c-1842", "order_id": "0190f3c2-7a4b-7c3d-8e9f-0123456789ab", "total_cents": 12999}"#;
        let escaped = plain.replace("the door", r#"the \"door\""#);
        for text in [plain, escaped.as_str()] {
            let content = format!("{ID} {NOW} 5 order6 c-184212 order.placed- 2 {{}}{text}");
            let n = 200_000;
            let per = |f: &mut dyn FnMut()| {
                let started = std::time::Instant::now();
                for _ in 0..n {
                    f();
                }
                started.elapsed().as_nanos() as f64 / n as f64
            };
            let decode_ns = per(&mut || {
                std::hint::black_box(decode(std::hint::black_box(&content)).unwrap());
            });
            let check_ns = per(&mut || {
                let m = decode(std::hint::black_box(&content)).unwrap();
                let _ = std::hint::black_box(check(&m, NOW + 1));
            });
            let mut a = Admission::default();
            let mut i = 0i64;
            let admit_ns = per(&mut || {
                let m = decode(std::hint::black_box(&content)).unwrap();
                i += 1;
                let _ = std::hint::black_box(a.admit(&m, content.as_bytes(), i));
                if i % 200 == 0 {
                    a.confirmed_through(i);
                }
            });
            let walk_ns = per(&mut || {
                let _ = std::hint::black_box(payload(std::hint::black_box(text)));
            });
            // The reference: serde_json's validation of the same text
            // (grammar only, none of jsonb's rules).
            let serde_ns = per(&mut || {
                use serde::Deserialize;
                let mut de = serde_json::Deserializer::from_str(std::hint::black_box(text));
                let _ = std::hint::black_box(
                    serde::de::IgnoredAny::deserialize(&mut de).and_then(|_| de.end()),
                );
            });
            eprintln!(
                "{} byte payload{}: decode {decode_ns:.0} ns; the check {:.0} ns more; with the id window {:.0} ns more per event; the payload's walk {walk_ns:.0} ns (serde_json's grammar alone: {serde_ns:.0} ns)",
                text.len(),
                if text.contains('\\') { " with an escape" } else { "" },
                check_ns - decode_ns,
                admit_ns - decode_ns,
            );
        }
    }
}
