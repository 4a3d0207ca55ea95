//! Claimed rows into [`Event`]s, for every row the table accepts.
//!
//! Decoding is total: a row that cannot become an event (a timestamp no
//! client can represent, text that is not UTF-8 in a `SQL_ASCII` database)
//! comes back as an [`Undecodable`] carrying the reason, so the relay can
//! dead-letter it alone instead of stopping on it. Nothing here re-parses the
//! payload: it stays the text PostgreSQL returned for the `jsonb`.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde_json::value::RawValue;
use sqlx::postgres::PgRow;
use sqlx::{Decode, Postgres, Row, Type};
use uuid::Uuid;

use crate::event::Event;

/// A row that could not be decoded, with what was wrong. Its `event` holds
/// what could be read (id, seq, aggregate and partition always can), so the
/// relay can order, block and dead-letter it like any other event.
#[derive(Debug, Clone)]
pub(crate) struct Undecodable {
    pub event: Event,
    pub reason: String,
}

/// One claimed row: its event, or why it has none, and its location.
pub(crate) struct DecodedRow {
    pub event: Result<Event, Undecodable>,
    pub ctid: String,
}

/// Decodes a row of [`crate::queries::EVENT_ACK_AND_CLAIM`]. Fails only if
/// the row lacks its id, which the primary key rules out.
pub(crate) fn claimed_row(row: &PgRow) -> Result<DecodedRow, sqlx::Error> {
    let id: Uuid = row.try_get(0)?;
    let ctid: String = row.try_get(11)?;
    let mut problems: Vec<String> = Vec::new();
    let mut field =
        |index: usize, name: &str| -> Option<String> { take(row, index, name, &mut problems) };
    let aggregate_type = field(2, "aggregate_type");
    let aggregate_id = field(3, "aggregate_id");
    let event_type = field(4, "event_type");
    let payload = field(5, "payload");
    let headers_text = field(6, "headers");
    let mut event = Event {
        id,
        seq: take(row, 1, "seq", &mut problems).unwrap_or_default(),
        aggregate_type: aggregate_type.unwrap_or_default(),
        aggregate_id: aggregate_id.unwrap_or_default(),
        event_type: event_type.unwrap_or_default(),
        payload: payload.unwrap_or_else(|| "null".to_owned()),
        headers: BTreeMap::new(),
        topic: take::<Option<String>>(row, 7, "topic", &mut problems).flatten(),
        attempts: take(row, 8, "attempts", &mut problems).unwrap_or_default(),
        created_at: DateTime::<Utc>::UNIX_EPOCH,
        partition: take(row, 10, "partition", &mut problems).unwrap_or_default(),
    };
    if let Some(text) = headers_text {
        match headers(&text) {
            Ok(h) => event.headers = h,
            Err(e) => problems.push(e),
        }
    }
    match take::<Option<DateTime<Utc>>>(row, 9, "created_at", &mut problems) {
        Some(Some(at)) => event.created_at = at,
        Some(None) => {
            let shown: Option<String> = row.try_get(12).ok().flatten();
            problems.push(format!(
                "created_at is {}, which no client can represent (timestamps must be finite and before year {MAX_YEAR})",
                shown.as_deref().unwrap_or("out of range")
            ));
        }
        None => {}
    }
    let event = if problems.is_empty() {
        Ok(event)
    } else {
        Err(Undecodable {
            reason: format!("undecodable row: {}", problems.join("; ")),
            event,
        })
    };
    Ok(DecodedRow { event, ctid })
}

/// The first year a stored timestamp may not reach: the bound of the
/// `CHECK` constraints (migration 2) and of the claim's guard.
pub const MAX_YEAR: u32 = 100_000;

fn take<'r, T>(row: &'r PgRow, index: usize, name: &str, problems: &mut Vec<String>) -> Option<T>
where
    T: Decode<'r, Postgres> + Type<Postgres>,
{
    match row.try_get::<T, _>(index) {
        Ok(v) => Some(v),
        Err(e) => {
            problems.push(format!("column {name}: {e}"));
            None
        }
    }
}

/// Decodes the `headers` column's JSON text value by value. A string value is
/// the header's value; any other value (a number, an object, 200 nested
/// arrays) is carried as its JSON text, so one odd value never takes its
/// neighbours with it. Fails only if `text` is not a JSON object, which the
/// table's `CHECK` rules out.
pub(crate) fn headers(text: &str) -> Result<BTreeMap<String, String>, String> {
    if text == "{}" {
        return Ok(BTreeMap::new());
    }
    // Values are kept raw: no recursion limit, no number parsing.
    let raw: BTreeMap<String, Box<RawValue>> = serde_json::from_str(text)
        .map_err(|e| format!("headers are not a JSON object of values: {e}"))?;
    Ok(raw
        .into_iter()
        .map(|(name, value)| {
            let json = value.get();
            let value = if json.starts_with('"') {
                serde_json::from_str::<String>(json).unwrap_or_else(|_| json.to_owned())
            } else {
                json.to_owned()
            };
            (name, value)
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_deep_or_huge_header_value_keeps_its_neighbours() {
        let deep = format!("{}{}", "[".repeat(200), "]".repeat(200));
        let text = format!(
            r#"{{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "deep": {deep}, "n": 1e400, "big": 123456789012345678901234567890}}"#
        );
        let h = headers(&text).unwrap();
        assert_eq!(
            h["traceparent"],
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
        );
        assert_eq!(h["deep"], deep);
        assert_eq!(h["n"], "1e400");
        assert_eq!(h["big"], "123456789012345678901234567890");
    }

    #[test]
    fn string_values_are_unescaped() {
        let h = headers(r#"{"a": "line\nbreak \u00e9 \"q\"", "b": null, "c": true}"#).unwrap();
        assert_eq!(h["a"], "line\nbreak é \"q\"");
        assert_eq!(h["b"], "null");
        assert_eq!(h["c"], "true");
    }

    #[test]
    fn not_an_object_is_an_error_not_a_panic() {
        assert!(headers("[1, 2]").is_err());
        assert!(headers("").is_err());
    }

    /// JSON values of arbitrary shape, numbers written as PostgreSQL may
    /// print them (beyond f64 and u64).
    fn json_text() -> impl Strategy<Value = String> {
        let leaf = prop_oneof![
            Just("null".to_owned()),
            any::<bool>().prop_map(|b| b.to_string()),
            "-?[1-9][0-9]{0,40}(\\.[0-9]{1,30})?(e[+-]?[0-9]{1,3})?",
            any::<String>().prop_map(|s| serde_json::to_string(&s).unwrap()),
        ];
        leaf.prop_recursive(8, 64, 6, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..6)
                    .prop_map(|v| format!("[{}]", v.join(", "))),
                prop::collection::btree_map(any::<String>(), inner, 0..6).prop_map(|m| {
                    let parts: Vec<String> = m
                        .into_iter()
                        .map(|(k, v)| format!("{}: {v}", serde_json::to_string(&k).unwrap()))
                        .collect();
                    format!("{{{}}}", parts.join(", "))
                }),
            ]
        })
    }

    proptest! {
        #[test]
        fn every_header_value_survives_decoding(
            entries in prop::collection::btree_map(any::<String>(), json_text(), 0..8)
        ) {
            let text = format!("{{{}}}", entries.iter()
                .map(|(k, v)| format!("{}: {v}", serde_json::to_string(k).unwrap()))
                .collect::<Vec<_>>().join(", "));
            let decoded = headers(&text).unwrap();
            prop_assert_eq!(decoded.len(), entries.len());
            for (k, v) in &entries {
                let expected = match serde_json::from_str::<String>(v) {
                    Ok(s) if v.starts_with('"') => s,
                    _ => v.clone(),
                };
                prop_assert_eq!(&decoded[k], &expected);
            }
        }

        #[test]
        fn header_decoding_never_panics(text in any::<String>()) {
            let _ = headers(&text);
        }

        #[test]
        fn a_json_line_embeds_the_payload_text_unchanged(
            payload in json_text(),
            headers in prop::collection::btree_map(any::<String>(), any::<String>(), 0..4),
            aggregate_id in any::<String>(),
        ) {
            let event = Event {
                id: Uuid::nil(),
                seq: 7,
                aggregate_type: "order".into(),
                aggregate_id,
                event_type: "order.created".into(),
                payload: payload.clone(),
                headers: headers.clone(),
                topic: None,
                attempts: 0,
                created_at: DateTime::<Utc>::UNIX_EPOCH,
                partition: 0,
            };
            let line = event.json_line();
            prop_assert!(!line.contains('\n'));
            #[derive(serde::Deserialize)]
            struct Back<'a> {
                #[serde(borrow)]
                payload: &'a RawValue,
                headers: BTreeMap<String, String>,
                aggregate_id: String,
            }
            let back: Back = serde_json::from_str(&line).unwrap();
            prop_assert_eq!(back.payload.get(), payload.as_str());
            prop_assert_eq!(back.headers, headers);
            prop_assert_eq!(back.aggregate_id, event.aggregate_id);
        }
    }
}
