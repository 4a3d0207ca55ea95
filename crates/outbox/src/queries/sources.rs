//! The relay of many sources: what one statement per database asks of all
//! its dormant schemas at once. Each is a template for one schema, joined
//! over the schemas by the caller (`relay/sources/sql.rs`); `{schema}` is a
//! validated name that never needs quoting, `{i}` the schema's index in the
//! caller's list.

/// The inserts each table (`$1`: `schema.outbox_events` names) has seen,
/// as the statistics system counts them, in the order given; -1 where the
/// table does not exist. The cheap dormant check: a count that moved is a
/// commit no wake-up announced (an announcement that lapsed, or that an
/// instance working the schema alone withdrew). Reads shared memory, no
/// table: 0.3-0.5 ms for 200 schemas, where the full check below costs
/// about 60 ms (planning and locking 200 tables). A producer's counts show
/// at the latest when its session next reports them (within about a second
/// of its commit).
pub const SOURCE_INSERTS_COUNTED: &str = "
SELECT coalesce(pg_stat_get_tuples_inserted(to_regclass(t.name)), -1)
FROM unnest($1::text[]) WITH ORDINALITY AS t(name, i) ORDER BY t.i";

/// One schema's row of the full dormant check (a slice of the dormant
/// schemas per round, each in turn): `{i}` if the schema holds an
/// event a claim would take now (not delivered, not dead, no backoff
/// pending, its type not paused), nothing otherwise. It reads the pending
/// index from its start and stops at the first such row, so an idle schema
/// costs an index probe. What it finds that no wake-up announced: an
/// insert the cheap check missed, a dead letter replayed (an update), rows
/// of a relay that died.
pub const SOURCE_WORK_FOUND: &str = "SELECT {i} WHERE EXISTS (
    SELECT 1 FROM {schema}.outbox_events e
    WHERE e.processed_at IS NULL AND e.dead_lettered_at IS NULL
      AND (e.next_attempt_at IS NULL OR e.next_attempt_at <= now())
      AND NOT EXISTS (SELECT 1 FROM {schema}.outbox_pauses p
                      WHERE p.aggregate_type IS NULL OR p.aggregate_type = e.aggregate_type))";

/// One schema's part of renewing the dormant sources' announcements: pushes
/// the time until which producers' trigger notifies to `$1` ms from now,
/// never back, and only while it stands (above 0). A 0 was written by an
/// instance that works this schema alone and asked producers to stop
/// notifying; writing over it would make every producer notify for an
/// awake relay. Such a schema is still found by the dormant check.
pub const SOURCE_ANNOUNCEMENT_RENEW: &str = "SELECT setval('{schema}.outbox_relay_idle_until',
    greatest(last_value, (date_part('epoch', now()) * 1000)::bigint + $1::bigint))
FROM {schema}.outbox_relay_idle_until WHERE last_value > 0";

/// One schema's part of announcing newly served schemas as idle: as
/// [`SOURCE_ANNOUNCEMENT_RENEW`], but whatever stands (a schema just found
/// has nobody awake on it in this process yet).
pub const SOURCE_ANNOUNCEMENT_NEW: &str = "SELECT setval('{schema}.outbox_relay_idle_until',
    greatest(coalesce(pg_sequence_last_value('{schema}.outbox_relay_idle_until'), 0),
             (date_part('epoch', now()) * 1000)::bigint + $1::bigint))";

/// Sent by `outbox migrate` after it migrated a schema (payload: the
/// schema's name): relays serving a pattern match the database's schemas
/// again at once instead of at their next rescan.
pub const SCHEMAS_CHANGED_CHANNEL: &str = "outbox_schemas";

/// [`SCHEMAS_CHANGED_CHANNEL`]'s notification.
pub const SCHEMAS_CHANGED_NOTIFY: &str = "SELECT pg_notify('outbox_schemas', $1)";

/// The database a connection reached, however its URL was spelled: the
/// cluster's system identifier (fixed at `initdb`, the same for every
/// address of the server) and the database's name. Where the role may not
/// call `pg_control_system()` this fails, and the caller compares the
/// URLs' addresses instead.
pub const DATABASE_IDENTITY: &str =
    "SELECT system_identifier::text || '/' || current_database() FROM pg_control_system()";
