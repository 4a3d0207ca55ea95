//! The console's statements, one per constant; `{schema}` is the configured
//! schema. Every read runs in a read-only transaction (`store.rs`); only the
//! pause statements write, and the dead-letter actions go through the
//! library's `outbox::DeadLetters` (the same statements as
//! `outbox dead-letters retry|discard`).
//!
//! Times come back as text in UTC (`TS`), so a stored value no client type
//! can hold (`infinity`, rows older than migration 2) is shown, not an
//! error. Payloads and headers come back as the text PostgreSQL prints for
//! the `jsonb`: nothing is re-parsed, so numbers stay as stored.

/// A timestamp column as UTC text, `{c}` being the column.
macro_rules! ts {
    ($c:literal) => {
        concat!(
            "to_char(",
            $c,
            " AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.MS\"Z\"')"
        )
    };
}

/// The overview's figures, one row. Counts are bounded: each stops at
/// `$1` rows (the caller shows "at least" and an estimate beyond it), so
/// none reads more than `$1` entries of its index, however large the
/// table: pending through the unprocessed-rows index's predicate, retrying
/// through the retry index's (`next_attempt_at IS NOT NULL`), dead letters
/// through the dead-letter index's (migration 12).
///
/// The last column is how many transactions the cluster's oldest snapshot
/// is behind (what holds back vacuum, and wraparound), from
/// `pg_stat_activity`. The oldest claimable event's and the oldest
/// snapshot's ages are the library's (`outbox::Status`), read beside it,
/// so the console shows what `/metrics` and `outbox status` show.
pub const OVERVIEW_COUNTS: &str = "
SELECT
  (SELECT count(*) FROM (SELECT FROM {schema}.outbox_events
    WHERE processed_at IS NULL AND dead_lettered_at IS NULL LIMIT $1) p),
  (SELECT count(*) FROM (SELECT FROM {schema}.outbox_events
    WHERE next_attempt_at IS NOT NULL AND coalesce(processed_at, dead_lettered_at) IS NULL
    LIMIT $1) r),
  (SELECT count(*) FROM (SELECT FROM {schema}.outbox_events
    WHERE dead_lettered_at IS NOT NULL AND processed_at IS NULL LIMIT $1) d),
  (SELECT max(age(backend_xmin))::bigint FROM pg_stat_activity
    WHERE backend_xmin IS NOT NULL AND pid <> pg_backend_pid())";

/// The estimated entries of the pending, retrying and dead-letter indexes
/// (their predicates are the overview's three counts), as PostgreSQL
/// recorded them at the table's last vacuum or analyze; NULL where an index
/// is missing or was never measured. Shown only for a count past its bound.
pub const OVERVIEW_ESTIMATES: &str = "
SELECT (SELECT nullif(reltuples, -1)::bigint FROM pg_class
         WHERE oid = to_regclass('{schema}.idx_outbox_unprocessed')),
       (SELECT nullif(reltuples, -1)::bigint FROM pg_class
         WHERE oid = to_regclass('{schema}.idx_outbox_retrying')),
       (SELECT nullif(reltuples, -1)::bigint FROM pg_class
         WHERE oid = to_regclass('{schema}.idx_outbox_dead_letters'))";

/// Rows delivered in the last minute and kept (retention mode), newest
/// first, at most `$1`: how many, and the oldest one's age in seconds.
/// Reads at most `$1` entries of the processed-rows index (backwards).
pub const DELIVERED_KEPT: &str = "
SELECT count(*), EXTRACT(EPOCH FROM now() - min(processed_at))::float8 FROM (
  SELECT processed_at FROM {schema}.outbox_events
  WHERE processed_at IS NOT NULL AND processed_at > now() - interval '1 minute'
  ORDER BY processed_at DESC
  LIMIT $1) d";

/// Rows deleted from the outbox table since PostgreSQL's statistics were
/// reset (in the default delete mode, one per delivered event), from the
/// cumulative statistics (each backend reports its own at most about once
/// a second).
pub const DELETED_TOTAL: &str = "
SELECT n_tup_del FROM pg_stat_user_tables
WHERE relid = to_regclass('{schema}.outbox_events')";

/// Relay instances that have announced themselves, with the partitions
/// each holds under a live lease, the highest epoch and the earliest lease
/// expiry among them (ms from now), and the heartbeat's age (ms).
pub const OVERVIEW_RELAYS: &str = concat!(
    "
SELECT i.instance_id, ",
    ts!("i.heartbeat_at"),
    ", (EXTRACT(EPOCH FROM now() - i.heartbeat_at) * 1000)::bigint, ",
    ts!("i.started_at"),
    ",
       coalesce(array_agg(p.partition ORDER BY p.partition)
                FILTER (WHERE p.partition IS NOT NULL), '{}')::int[],
       max(p.epoch),
       (EXTRACT(EPOCH FROM min(p.lease_until) - now()) * 1000)::bigint
FROM {schema}.outbox_relay_instances i
LEFT JOIN {schema}.outbox_partitions p ON p.owner = i.instance_id AND p.lease_until > now()
GROUP BY i.instance_id, i.heartbeat_at, i.started_at
ORDER BY i.instance_id"
);

/// Partitions no relay holds under a live lease (never owned, released, or
/// the lease ran out), with their last owner.
pub const OVERVIEW_UNOWNED: &str = "
SELECT partition, owner FROM {schema}.outbox_partitions
WHERE owner IS NULL OR lease_until IS NULL OR lease_until <= now()
ORDER BY partition";

/// The pauses in force (migration 10): `aggregate_type` NULL is the whole
/// outbox; it sorts first.
pub const PAUSE_LIST: &str = concat!(
    "
SELECT aggregate_type, ",
    ts!("paused_at"),
    ", paused_by FROM {schema}.outbox_pauses
ORDER BY aggregate_type NULLS FIRST"
);

/// Pauses delivery of aggregate type `$1` (NULL: everything), by `$2`.
/// Pausing what is already paused changes nothing (the first pause's time
/// stays).
pub const PAUSE_ADD: &str = "
INSERT INTO {schema}.outbox_pauses (aggregate_type, paused_by) VALUES ($1, $2)
ON CONFLICT ((aggregate_type IS NULL), (coalesce(aggregate_type, ''))) DO NOTHING";

/// Resumes delivery of aggregate type `$1` (NULL: the whole-outbox pause
/// only; a type paused on its own stays paused): how many pauses it
/// lifted, and whether the whole outbox stays paused by a switch back to
/// the table mode. That pause is never lifted here: it holds the table's
/// rows behind the events still in the slot, and the relay lifts it once
/// it has read the slot to the switch.
pub const PAUSE_REMOVE: &str = "
WITH lifted AS (
    DELETE FROM {schema}.outbox_pauses
    WHERE aggregate_type IS NOT DISTINCT FROM $1
      AND paused_by NOT LIKE 'outbox migrate --mode table:%'
    RETURNING 1)
SELECT (SELECT count(*) FROM lifted),
       $1::text IS NULL AND EXISTS (
           SELECT FROM {schema}.outbox_pauses
           WHERE aggregate_type IS NULL AND paused_by LIKE 'outbox migrate --mode table:%')";

/// Aggregates held up by a failing event: among the oldest `$2` retrying
/// events and the oldest `$2` dead letters (each read through its own
/// index, in seq order), each aggregate's first one, at most `$1` of them,
/// oldest first, with how many live events of the aggregate are pending
/// behind it. Bounded so the page costs the same however many events fail:
/// an aggregate whose first failure lies past the oldest `$2` of its kind
/// is left out only when `$2` older failures exist.
///
/// The waiting rows are found in one pass over the unprocessed rows
/// (through their index), kept only when their aggregate is one of the
/// `$1` (a hash of those, not of the pending rows).
pub const STUCK_AGGREGATES: &str = concat!(
    "
WITH failing AS (
    (SELECT aggregate_type, aggregate_id, id, seq, event_type, attempts, last_error,
            next_attempt_at, dead_lettered_at
     FROM {schema}.outbox_events
     WHERE dead_lettered_at IS NOT NULL AND processed_at IS NULL
     ORDER BY seq
     LIMIT $2)
    UNION ALL
    (SELECT aggregate_type, aggregate_id, id, seq, event_type, attempts, last_error,
            next_attempt_at, dead_lettered_at
     FROM {schema}.outbox_events
     WHERE next_attempt_at IS NOT NULL AND next_attempt_at >= '-infinity'
       AND coalesce(processed_at, dead_lettered_at) IS NULL
     ORDER BY seq
     LIMIT $2)),
heads AS (
    SELECT DISTINCT ON (aggregate_type, aggregate_id) * FROM failing
    ORDER BY aggregate_type, aggregate_id, seq),
top AS MATERIALIZED (SELECT * FROM heads ORDER BY seq LIMIT $1),
waiting AS (
    SELECT w.aggregate_type, w.aggregate_id, w.seq FROM {schema}.outbox_events w
    WHERE w.processed_at IS NULL AND w.dead_lettered_at IS NULL
      AND (w.aggregate_type, w.aggregate_id) IN (SELECT aggregate_type, aggregate_id FROM top)),
behind AS (
    SELECT h.aggregate_type, h.aggregate_id, count(*) AS n
    FROM waiting w JOIN top h USING (aggregate_type, aggregate_id)
    WHERE w.seq > h.seq
    GROUP BY 1, 2)
SELECT h.aggregate_type, h.aggregate_id, h.id, h.event_type, h.attempts, h.last_error, ",
    ts!("h.next_attempt_at"),
    ", ",
    ts!("h.dead_lettered_at"),
    ", coalesce(b.n, 0)
FROM top h LEFT JOIN behind b USING (aggregate_type, aggregate_id)
ORDER BY h.seq"
);

/// The columns of an event row, shared by the search and the detail.
macro_rules! event_columns {
    () => {
        concat!(
            "id, seq, aggregate_type, aggregate_id, event_type, attempts, last_error, topic, ",
            "{schema}.outbox_partition(aggregate_id), ",
            ts!("created_at"),
            ", ",
            ts!("processed_at"),
            ", ",
            ts!("next_attempt_at"),
            ", ",
            ts!("dead_lettered_at"),
            ", CASE WHEN processed_at IS NOT NULL THEN 'processed' ",
            "WHEN dead_lettered_at IS NOT NULL THEN 'dead' ",
            "WHEN next_attempt_at IS NOT NULL THEN 'retrying' ELSE 'pending' END"
        )
    };
}

/// One event by id (`$1`), with its payload and headers as stored.
pub const EVENT_BY_ID: &str = concat!(
    "SELECT ",
    event_columns!(),
    ", payload::text, headers::text FROM {schema}.outbox_events WHERE id = $1"
);

/// The event search: every criterion optional (NULL matches all): `$1`
/// aggregate type, `$2` aggregate id, `$3` event type, `$4` created at or
/// after, `$5` created before, `$6` state (`pending`, `retrying`,
/// `processed`, `dead`). Keyset pagination: seq above `$7`, in seq order,
/// at most `$8` rows; never an OFFSET, so a page costs the same however
/// deep.
///
/// Planned afresh for each search (the read transaction forces custom
/// plans): with the values known, every `$n IS NULL OR …` left unused
/// folds away, and a state's test becomes the predicate of its partial
/// index (pending and retrying: the unprocessed rows', dead: the dead
/// letters'), walked in seq order and stopped after one page. A search
/// by aggregate, event type or time alone, or of processed rows, reads
/// the table (no index of their own: each would cost every producer's
/// INSERT; docs/console.md). The page's rows are chosen by id and seq
/// first and only those are formatted (formatting every matching row
/// before the sort took most of a search of a million processed rows).
pub const EVENT_SEARCH: &str = concat!(
    "SELECT ",
    event_columns!(),
    " FROM {schema}.outbox_events
WHERE id IN (
  SELECT id FROM {schema}.outbox_events
  WHERE ($1::text IS NULL OR aggregate_type = $1::text)
    AND ($2::text IS NULL OR aggregate_id = $2::text)
    AND ($3::text IS NULL OR event_type = $3::text)
    AND ($4::timestamptz IS NULL OR created_at >= $4::timestamptz)
    AND ($5::timestamptz IS NULL OR created_at < $5::timestamptz)
    AND ($6::text IS NULL OR $6::text <> 'pending'
         OR (processed_at IS NULL AND dead_lettered_at IS NULL AND next_attempt_at IS NULL))
    AND ($6::text IS NULL OR $6::text <> 'retrying'
         OR (processed_at IS NULL AND dead_lettered_at IS NULL AND next_attempt_at IS NOT NULL))
    AND ($6::text IS NULL OR $6::text <> 'dead'
         OR (dead_lettered_at IS NOT NULL AND processed_at IS NULL))
    AND ($6::text IS NULL OR $6::text <> 'processed' OR processed_at IS NOT NULL)
    AND seq > $7
  ORDER BY seq
  LIMIT $8)
ORDER BY seq"
);

/// The planner's estimate of the whole table's rows, shown instead of a
/// `count(*)` over the table.
pub const EVENT_ESTIMATE: &str = "
SELECT greatest(reltuples, 0)::bigint FROM pg_class
WHERE oid = to_regclass('{schema}.outbox_events')";

/// The dead letters `$1` (ids, from the library's
/// `DeadLetters::page_ids`, which holds the predicate a retry or discard
/// runs), in seq order.
pub const DEAD_LETTER_PAGE: &str = concat!(
    "SELECT ",
    event_columns!(),
    " FROM {schema}.outbox_events WHERE id = ANY($1) ORDER BY seq"
);
