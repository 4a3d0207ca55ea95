//! The WAL mode's message: what `outbox_emit` writes into
//! `pg_logical_emit_message` (migrations/wal_mode_on.sql), read back.
//!
//! As text: `<id> <created_at in µs since 1970> `, then for the aggregate
//! type, aggregate id, event type, topic and headers `<byte length>
//! <value>` (the topic's length is `-` when there is none), then the
//! payload as jsonb prints it, to the end. Lengths make every value
//! byte-exact whatever it holds (spaces, newlines, digits).

use uuid::Uuid;

/// One event, decoded from its message; the strings borrow the message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Emitted<'m> {
    /// The event id.
    pub id: Uuid,
    /// The producing transaction's start (`now()`), µs since 1970.
    pub created_at_micros: i64,
    /// The aggregate's kind.
    pub aggregate_type: &'m str,
    /// The aggregate's id.
    pub aggregate_id: &'m str,
    /// The event's kind.
    pub event_type: &'m str,
    /// The topic override, if any.
    pub topic: Option<&'m str>,
    /// The headers object as jsonb prints it.
    pub headers: &'m str,
    /// The payload as jsonb prints it.
    pub payload: &'m str,
}

/// Why a message could not be read: the byte offset and what was expected
/// there.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("malformed outbox message at byte {at}: expected {expected}")]
pub struct Malformed {
    /// Where reading stopped.
    pub at: usize,
    /// What should have been there.
    pub expected: &'static str,
}

/// Reads one message's content.
pub fn decode(content: &str) -> Result<Emitted<'_>, Malformed> {
    let mut r = Reader { s: content, at: 0 };
    let id = r.word("an event id")?;
    let id = Uuid::parse_str(id).map_err(|_| r.fail_back(id.len(), "an event id"))?;
    let micros = r.word("a time in microseconds")?;
    let created_at_micros = micros
        .parse()
        .map_err(|_| r.fail_back(micros.len(), "a time in microseconds"))?;
    let aggregate_type = r.sized("the aggregate type's length")?;
    let aggregate_id = r.sized("the aggregate id's length")?;
    let event_type = r.sized("the event type's length")?;
    let topic = if r.rest().starts_with("- ") {
        r.at += 2;
        None
    } else {
        Some(r.sized("the topic's length")?)
    };
    let headers = r.sized("the headers' length")?;
    Ok(Emitted {
        id,
        created_at_micros,
        aggregate_type,
        aggregate_id,
        event_type,
        topic,
        headers,
        payload: r.rest(),
    })
}

struct Reader<'m> {
    s: &'m str,
    at: usize,
}

impl<'m> Reader<'m> {
    fn rest(&self) -> &'m str {
        &self.s[self.at..]
    }

    fn fail_back(&self, back: usize, expected: &'static str) -> Malformed {
        Malformed {
            at: self.at - back - 1,
            expected,
        }
    }

    /// The text up to the next space, which is consumed.
    fn word(&mut self, expected: &'static str) -> Result<&'m str, Malformed> {
        let rest = self.rest();
        let end = rest.find(' ').ok_or(Malformed {
            at: self.at,
            expected,
        })?;
        self.at += end + 1;
        Ok(&rest[..end])
    }

    /// `<length> <value>`: the value of that many bytes.
    fn sized(&mut self, expected: &'static str) -> Result<&'m str, Malformed> {
        let start = self.at;
        let len: usize = self.word(expected)?.parse().map_err(|_| Malformed {
            at: start,
            expected,
        })?;
        let rest = self.rest();
        let value = rest.get(..len).ok_or(Malformed {
            at: self.at,
            expected: "a value as long as its length says",
        })?;
        self.at += len;
        Ok(value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: &str = "0190f3c2-7a4b-7c3d-8e9f-0123456789ab";

    #[test]
    fn every_field_comes_back_byte_exact_whatever_it_holds() {
        let content = format!(
            "{ID} 1733512345123456 7 or der\n8 4 2 \u{1F600}12 order.placed5 a b c20 {{\"k\": \"v w\", \"n\": 1}}{{\"x\": [1, 2]}}"
        );
        let e = decode(&content).unwrap();
        assert_eq!(e.id.to_string(), ID);
        assert_eq!(e.created_at_micros, 1_733_512_345_123_456);
        assert_eq!(e.aggregate_type, "or der\n");
        assert_eq!(e.aggregate_id, "4 2 \u{1F600}");
        assert_eq!(e.event_type, "order.placed");
        assert_eq!(e.topic, Some("a b c"));
        assert_eq!(e.headers, "{\"k\": \"v w\", \"n\": 1}");
        assert_eq!(e.payload, "{\"x\": [1, 2]}");
    }

    #[test]
    fn no_topic_is_a_dash_and_an_empty_value_is_length_zero() {
        let content = format!("{ID} -5 0 1 x1 y- 2 {{}}null");
        let e = decode(&content).unwrap();
        assert_eq!(e.created_at_micros, -5);
        assert_eq!(
            (e.aggregate_type, e.aggregate_id, e.event_type),
            ("", "x", "y")
        );
        assert_eq!(e.topic, None);
        assert_eq!((e.headers, e.payload), ("{}", "null"));
    }

    #[test]
    fn a_truncated_or_foreign_message_is_refused_with_where_it_stopped() {
        for bad in [
            "",
            "not-a-uuid 1 1 a1 b1 c- 2 {}1",
            &format!("{ID} soon 1 a1 b1 c- 2 {{}}1"),
            &format!("{ID} 1 9 a"),
            &format!("{ID} 1 1 a1 b1 c- x {{}}1"),
        ] {
            let err = decode(bad).unwrap_err();
            assert!(err.at <= bad.len(), "{bad:?}: {err}");
        }
    }

    #[test]
    fn a_length_that_splits_a_character_is_refused_not_a_panic() {
        // "é" is two bytes: a length of 1 ends inside it.
        let err = decode(&format!("{ID} 1 1 é1 b1 c- 2 {{}}1")).unwrap_err();
        assert_eq!(err.expected, "a value as long as its length says");
    }
}
