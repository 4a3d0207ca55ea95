//! The producer side's statements: enqueueing events (`Outbox::enqueue`,
//! `enqueue_many`) and the wake-up sent after commit.

/// One event with only the five columns the common case sets (no headers,
/// no topic): those are left to their defaults, less to encode and parse
/// on the producer's hot path.
pub const EVENT_INSERT_PLAIN: &str = "INSERT INTO {schema}.outbox_events
    (id, aggregate_type, aggregate_id, event_type, payload)
VALUES ($1, $2, $3, $4, $5)";

/// One event with every column a caller can set.
pub const EVENT_INSERT_ONE: &str = "INSERT INTO {schema}.outbox_events
    (id, aggregate_type, aggregate_id, event_type, payload, headers, topic)
VALUES ($1, $2, $3, $4, $5, $6, $7)";

/// Many events in one statement; `WITH ORDINALITY` + `ORDER BY` keeps the
/// caller's order in `seq`.
pub const EVENT_INSERT_MANY: &str = "INSERT INTO {schema}.outbox_events
    (id, aggregate_type, aggregate_id, event_type, payload, headers, topic)
SELECT id, aggregate_type, aggregate_id, event_type, payload::jsonb, headers::jsonb, topic
FROM UNNEST($1::uuid[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[])
     WITH ORDINALITY AS e(id, aggregate_type, aggregate_id, event_type, payload, headers, topic, ord)
ORDER BY ord";

/// Wakes the relays listening on channel `$1`: sent on its own connection,
/// after the producer's commit, never inside its transaction.
pub const WAKEUP_NOTIFY: &str = "SELECT pg_notify($1, '')";
