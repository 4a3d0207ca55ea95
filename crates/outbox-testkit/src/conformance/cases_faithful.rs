//! The case that hands the publisher every odd row a plain-SQL producer can
//! write, and checks that what reaches the broker is the event as stored.

use std::collections::BTreeMap;
use std::time::Duration;

use sqlx::{PgPool, Row};
use uuid::Uuid;

use super::relay::{migrated_scope, spawn_relay};
use super::verify::Run;
use super::Harness;

/// Payload classes that a JSON library built on `f64`, a recursion limit or
/// lossy string handling would change, as SQL expressions of type `jsonb`.
pub const HOSTILE_PAYLOADS: &[(&str, &str)] = &[
    ("number beyond f64", r#"'{"n": 1e400}'::jsonb"#),
    ("tiny number", r#"'{"n": 1e-400}'::jsonb"#),
    (
        "30-digit integer and 22-digit fraction",
        r#"'{"id": 123456789012345678901234567890, "amount": 0.1000000000000000000001}'::jsonb"#,
    ),
    (
        "negative zero and exponent",
        r#"'[-0, -0.0, 1E+2, 2.50]'::jsonb"#,
    ),
    (
        "200 nested arrays",
        "(repeat('[', 200) || repeat(']', 200))::jsonb",
    ),
    (
        "200 nested objects",
        r#"(repeat('{"a": ', 200) || '1' || repeat('}', 200))::jsonb"#,
    ),
    ("bare string", r#"'"just a string"'::jsonb"#),
    ("bare number", "'42'::jsonb"),
    ("null", "'null'::jsonb"),
    ("false", "'false'::jsonb"),
    ("empty array", "'[]'::jsonb"),
    (
        "unicode",
        r#"'{"s": "é 日本 😀 \u2028 \u2029 \ud83d\ude00", "ключ": "значение"}'::jsonb"#,
    ),
    (
        "control characters",
        r#"'{"c": "\u0001\u0007\b\f\n\r\t\u001f\u007f", "q": "\"\\/"}'::jsonb"#,
    ),
    (
        "duplicate keys",
        r#"'{"a": 1, "a": 2, "b": {"a": 3, "a": 4}}'::jsonb"#,
    ),
    (
        "odd keys",
        r#"jsonb_build_object('', 1, ' ', 2, 'a.b', 3, E'line\nbreak', 4)"#,
    ),
    (
        "64 KiB string",
        "jsonb_build_object('blob', repeat('x', 65536))",
    ),
];

/// Header sets written by plain SQL, as `jsonb` expressions: every value
/// must arrive, strings as themselves, anything else as its JSON text.
pub const HOSTILE_HEADERS: &[(&str, &str)] = &[
    (
        "trace context beside a 200-level array",
        "jsonb_build_object('traceparent', '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01', \
         'deep', (repeat('[', 200) || repeat(']', 200))::jsonb)",
    ),
    (
        "numbers, objects, booleans and null as values",
        r#"'{"n": 1e400, "big": 123456789012345678901234567890, "o": {"a": [1]}, "t": true, "z": null, "s": "x"}'::jsonb"#,
    ),
    (
        "unicode and control characters",
        r#"'{"uni": "é😀", "ctl": "a\tb"}'::jsonb"#,
    ),
];

/// Enqueues every [`HOSTILE_PAYLOADS`] class (each as its own aggregate)
/// and every [`HOSTILE_HEADERS`] set by plain SQL, relays them, and checks
/// that each message's body is byte for byte the payload's text as
/// PostgreSQL prints it and that each header arrived as stored. `big_bytes`
/// adds one payload of that many bytes (a 50 MB one where the broker has no
/// limit), or nothing.
pub async fn delivers_every_event_as_stored<H: Harness>(
    h: &H,
    pool: &PgPool,
    big_bytes: Option<usize>,
) {
    let run = Run::start(h, "delivers_every_event_as_stored");
    let (name, case) = (&run.name, run.case);
    let scope = migrated_scope(h, pool, "faithful").await;
    let insert = |aggregate: String, payload: &str, headers: &str| {
        format!(
            "INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload, headers)
             VALUES ('{}', '{aggregate}', '{}', {payload}, {headers}) RETURNING id",
            scope.aggregate_type(),
            scope.event_type()
        )
    };
    let mut sql: Vec<(String, String)> = Vec::new();
    for (i, (class, payload)) in HOSTILE_PAYLOADS.iter().enumerate() {
        sql.push((class.to_string(), insert(format!("p{i}"), payload, "'{}'")));
    }
    for (i, (class, headers)) in HOSTILE_HEADERS.iter().enumerate() {
        sql.push((
            format!("headers: {class}"),
            insert(format!("h{i}"), r#"'{"n": 1}'"#, headers),
        ));
    }
    if let Some(bytes) = big_bytes {
        sql.push((
            format!("{bytes}-byte payload"),
            insert(
                "big".into(),
                &format!("jsonb_build_object('blob', repeat('y', {}))", bytes - 12),
                "'{}'",
            ),
        ));
    }
    let mut expected: BTreeMap<Uuid, (String, String, BTreeMap<String, String>)> = BTreeMap::new();
    for (class, statement) in &sql {
        let id: Uuid = sqlx::query_scalar(statement)
            .fetch_one(pool)
            .await
            .unwrap_or_else(|e| panic!("{name} / {case}: inserting {class}: {e}"));
        let row = sqlx::query(
            "SELECT payload::text,
                    (SELECT coalesce(jsonb_object_agg(key, CASE WHEN jsonb_typeof(value) = 'string'
                                THEN value #>> '{}' ELSE value::text END), '{}')
                       FROM jsonb_each(headers))::text
             FROM outbox_events WHERE id = $1",
        )
        .bind(id)
        .fetch_one(pool)
        .await
        .expect("reading the stored row back");
        let headers: BTreeMap<String, String> =
            serde_json::from_str(&row.get::<String, _>(1)).expect("headers as text values");
        expected.insert(id, (class.clone(), row.get(0), headers));
    }
    let relay = spawn_relay(h, pool, 50).await;
    let what = format!("relay to deliver {} odd events", expected.len());
    run.drain_and_stop(relay, pool, &what, Duration::from_secs(120))
        .await;
    run.assert_no_dead_letters(pool, "no event may be dead-lettered")
        .await;
    let received = h
        .consume(&scope, expected.len(), Duration::from_secs(60))
        .await;
    for (id, (class, payload, headers)) in &expected {
        let r = received
            .iter()
            .find(|r| r.event_id() == Some(*id))
            .unwrap_or_else(|| panic!("{name} / {case}: {class}: no message for event {id}"));
        if r.payload != payload.as_bytes() {
            let shown = |b: &[u8]| String::from_utf8_lossy(&b[..b.len().min(200)]).into_owned();
            panic!(
                "{name} / {case}: {class}: the message body differs from the stored payload\n stored: {}\n   sent: {}",
                shown(payload.as_bytes()),
                shown(&r.payload)
            );
        }
        for (k, v) in headers {
            assert_eq!(
                r.headers.get(k),
                Some(v),
                "{name} / {case}: {class}: header {k:?} must arrive as stored"
            );
        }
    }
    run.done(&format!(
        "{} events, every body and header as stored",
        expected.len()
    ));
}
