//! The relay's statements: claim and acknowledgement, retries, the idle
//! announcement, membership and partition leases.

/// Acknowledges the previous batch and claims the next in one round trip.
///
/// The `WITH` deletes (or, in retention mode, marks) the events the broker
/// acknowledged (`$3`); the main query claims pending, live rows of the
/// owned partitions (`$1`) in seq order, skipping every aggregate that has
/// an event waiting out a backoff (so later events of that aggregate are
/// held back). Both run on one snapshot, so the claim excludes the
/// acknowledged ids explicitly, together with the batch still being
/// published (`$5`, acknowledged ∪ in flight; as a hashed subplan:
/// `NOT (id = ANY($5))` would compare every scanned row with every id).
///
/// Acknowledged rows are found by the `ctid` the claim returned, checked
/// against their id (`$3`, `$4`): a direct heap access instead of a primary
/// key lookup per row (measured: 2.3 ms instead of 7.3 ms for 1,000 rows).
/// A row that moved meanwhile (a table rewrite) is simply not matched and
/// is delivered again: at least once still holds. The claim is a plain
/// read: partition ownership, not row locks, keeps other relays away.
///
/// The payload and headers come back as the text PostgreSQL prints for the
/// `jsonb`, so nothing is re-parsed on the way to the broker. A `created_at`
/// no client can represent (`infinity`, beyond year 100000: rows written
/// before migration 2's `CHECK`) comes back as NULL with its text beside it,
/// so the row is dead-lettered with that reason instead of stopping the
/// relay.
///
/// Fresh rows (never failed) are read from `seq >= $6` only, the claim
/// cursor (`relay/cursor.rs`), so rows deleted while something holds
/// PostgreSQL's xmin back are not walked again at every claim; rows whose
/// retry is due, and the aggregates held back by a backoff, are read from
/// anywhere through the retry index only: they test "pending" as
/// `coalesce(processed_at, dead_lettered_at) IS NULL`, which the planner
/// cannot match to the unprocessed-rows index's predicate, so statistics in
/// which almost nothing is pending never make it walk that index's dead
/// entries instead (migration 5), and `seq + 0` keeps it from sorting by
/// walking that index either. The last
/// columns, computed once per statement, tell the cursor how far it may
/// move: its xmin ([`SNAPSHOT_XMIN_PLAIN`], or [`SNAPSHOT_XMIN_HERE`]
/// waiting for `$7` while the plain one falls short), the claim's
/// own transaction id, the last seq drawn, and the lowest fresh pending seq
/// of the partitions from the cursor on, the table's size in pages (for
/// `relay/replan.rs`) and the plain xmin (which tells the store which
/// `{xmin}` the next claim needs). The own id, not the snapshot's `xmax`: `xmax` is one past the
/// last id that *ended*, so a writer that took its id earlier and is still
/// running can be at or above it; an id assigned now is above every id
/// assigned before. It is assigned only when rows come back (the column is
/// evaluated with the first row), and its commit is not flushed.
///
/// A row's partition is `outbox_partition(aggregate_id)` (a function,
/// migration 11: producers store no partition column), a filter on the
/// rows each index scan returns.
///
/// Paused delivery (migration 10, `outbox_pauses`): an aggregate type
/// paused there is skipped like a blocked aggregate, and a pause of the
/// whole outbox (`aggregate_type IS NULL`) claims nothing. The skipped rows
/// stay pending and in the cursor's lowest fresh seq, so the cursor never
/// passes them and they are claimed, in seq order, at the first claim after
/// the pause row is deleted.
///
/// Every test of `next_attempt_at` against `now()` carries the other bound
/// too (`<= 'infinity'`, `>= '-infinity'`: true of every timestamp), so
/// that the planner reads the retry index whatever the table's size when
/// the plan was made. Without statistics (a new or truncated table, or
/// before autovacuum's first analyze) it takes a one-sided range to match a
/// third of the rows and a two-sided one 0.5 %, so a plan made while the
/// table was a page or two read the whole heap for the backoffs at every
/// claim, dead rows included, until the plan was made again (measured: a
/// generic plan made on one page, after the table grew to 495 pages of
/// deleted rows, 3.4 ms per lookup instead of 0.02 ms; twice per claim).
pub const EVENT_ACK_AND_CLAIM: &str = "
WITH acked AS ({ack}),
blocked AS (
    SELECT aggregate_id FROM {schema}.outbox_events
    WHERE next_attempt_at > now() AND next_attempt_at <= 'infinity'
      AND coalesce(processed_at, dead_lettered_at) IS NULL),
paused AS (
    SELECT aggregate_type FROM {schema}.outbox_pauses WHERE aggregate_type IS NOT NULL)
SELECT id, seq, aggregate_type, aggregate_id, event_type, payload::text, headers::text,
       topic, attempts,
       CASE WHEN isfinite(created_at) AND created_at < '100000-01-01' THEN created_at END,
       {schema}.outbox_partition(aggregate_id), row_ctid::text,
       CASE WHEN isfinite(created_at) AND created_at < '100000-01-01' THEN NULL
            ELSE created_at::text END,
       {xmin},
       (SELECT pg_current_xact_id()::text::bigint
        FROM (SELECT set_config('synchronous_commit', 'off', true)) AS unflushed),
       (SELECT pg_sequence_last_value(pg_get_serial_sequence('{schema}.outbox_events', 'seq'))),
       (SELECT min(seq) FROM {schema}.outbox_events
        WHERE processed_at IS NULL AND dead_lettered_at IS NULL AND next_attempt_at IS NULL
          AND {schema}.outbox_partition(aggregate_id) = ANY($1::int[]) AND seq >= $6),
       pg_relation_size('{schema}.outbox_events') / 8192,
       {xmin_plain}
FROM (
    (SELECT *, ctid AS row_ctid FROM {schema}.outbox_events
     WHERE processed_at IS NULL AND dead_lettered_at IS NULL AND seq >= $6
       AND {schema}.outbox_partition(aggregate_id) = ANY($1::int[])
       AND id NOT IN (SELECT unnest($5::uuid[]))
       AND aggregate_id NOT IN (SELECT aggregate_id FROM blocked)
       AND aggregate_type NOT IN (SELECT aggregate_type FROM paused)
     ORDER BY seq
     LIMIT $2)
    UNION ALL
    (SELECT *, ctid AS row_ctid FROM {schema}.outbox_events
     WHERE next_attempt_at <= now() AND next_attempt_at >= '-infinity'
       AND coalesce(processed_at, dead_lettered_at) IS NULL
       AND seq < $6
       AND {schema}.outbox_partition(aggregate_id) = ANY($1::int[])
       AND id NOT IN (SELECT unnest($5::uuid[]))
       AND aggregate_id NOT IN (SELECT aggregate_id FROM blocked)
       AND aggregate_type NOT IN (SELECT aggregate_type FROM paused)
     ORDER BY seq + 0
     LIMIT $2)
) e
WHERE NOT EXISTS (SELECT FROM {schema}.outbox_pauses WHERE aggregate_type IS NULL)
ORDER BY seq
LIMIT $2";

/// The `{ack}` of [`EVENT_ACK_AND_CLAIM`] in delete-on-ack mode.
///
/// Not flushed to disk (`synchronous_commit` off for this transaction), as
/// every acknowledgement: if PostgreSQL itself crashes before its WAL
/// writer flushes (within `3 × wal_writer_delay`, 600 ms by default), the
/// acknowledgement is lost and the events are delivered again — at least
/// once holds, and no other relay's order changes (their first delivery
/// already happened). In exchange, producers' commits never queue behind
/// the relay's for WAL flushes (docs/performance.md).
///
/// The id is compared as text on purpose: `e.id = a.id` is a merge-join
/// clause the primary key's order can serve, so the planner keeps a *full*
/// scan of that index as a path, and where the statistics say the table is
/// nearly empty (as after a vacuum that could remove nothing while xmin
/// was held) that scan looks cheapest and is joined against every
/// acknowledged row: measured in `bench held-snapshot`, 7-8 ms and 23,000-
/// 30,000 buffers per claim. Compared as text, no index order applies, and
/// the row is fetched by its `ctid` whatever the statistics.
pub const ACK_DELETE: &str = "DELETE FROM {schema}.outbox_events e
USING unnest($3::text[]::tid[], $4::uuid[]) AS a(ct, id)
WHERE e.ctid = a.ct AND e.id::text = a.id::text
  AND (SELECT set_config('synchronous_commit', 'off', true)) IS NOT NULL";

/// The `{ack}` of [`EVENT_ACK_AND_CLAIM`] in retention mode; not flushed,
/// and the id compared as text, as in [`ACK_DELETE`].
pub const ACK_KEEP: &str =
    "UPDATE {schema}.outbox_events e SET processed_at = now(), next_attempt_at = NULL
FROM unnest($3::text[]::tid[], $4::uuid[]) AS a(ct, id)
WHERE e.ctid = a.ct AND e.id::text = a.id::text AND e.processed_at IS NULL
  AND (SELECT set_config('synchronous_commit', 'off', true)) IS NOT NULL";

/// Time until the earliest backoff of the owned partitions ends. The
/// second bound on `next_attempt_at` keeps it on the retry index, as in
/// [`EVENT_ACK_AND_CLAIM`].
pub const EVENT_NEXT_RETRY_MS: &str = "
SELECT (EXTRACT(EPOCH FROM min(next_attempt_at) - now()) * 1000)::bigint
FROM {schema}.outbox_events
WHERE next_attempt_at > now() AND next_attempt_at <= 'infinity'
  AND coalesce(processed_at, dead_lettered_at) IS NULL
  AND {schema}.outbox_partition(aggregate_id) = ANY($1::int[])";

/// The lowest fresh pending seq of the partitions (`$1`) below the claim
/// cursor (`$2`), if any: the cursor's periodic look behind itself
/// (`relay/cursor.rs`). It walks the unprocessed-rows index from its start,
/// over every dead entry left there while xmin is held, so it runs beside
/// the claims, never in front of one: a claim never waits for it.
pub const EVENT_FRESH_LOWEST_BELOW: &str = "
SELECT min(seq) FROM {schema}.outbox_events
WHERE processed_at IS NULL AND dead_lettered_at IS NULL AND next_attempt_at IS NULL
  AND {schema}.outbox_partition(aggregate_id) = ANY($1::int[]) AND seq < $2";

/// Acknowledged events, delete-on-ack mode. Not fenced: a delivered event is
/// delivered whoever owns its partition now. Not flushed, as [`ACK_DELETE`].
pub const EVENT_DELETE_DELIVERED: &str = "
DELETE FROM {schema}.outbox_events WHERE id = ANY($1::uuid[])
  AND (SELECT set_config('synchronous_commit', 'off', true)) IS NOT NULL";

/// Acknowledged events, retention mode. Not flushed, as [`ACK_DELETE`].
pub const EVENT_MARK_PROCESSED: &str = "
UPDATE {schema}.outbox_events SET processed_at = now(), next_attempt_at = NULL
WHERE id = ANY($1::uuid[]) AND processed_at IS NULL
  AND (SELECT set_config('synchronous_commit', 'off', true)) IS NOT NULL";

/// Failed events: count the attempt, keep the error, then either schedule
/// the next attempt or dead-letter. Fenced: only while this instance still
/// owns the partition under the epoch it claimed with ($6 holds the epoch per
/// partition, index = partition + 1).
pub const EVENT_MARK_FAILED: &str = "
UPDATE {schema}.outbox_events e SET
    attempts = e.attempts + 1,
    last_error = f.error,
    next_attempt_at = CASE WHEN f.dead THEN NULL
                           ELSE now() + f.delay_ms * interval '1 millisecond' END,
    dead_lettered_at = CASE WHEN f.dead THEN now() END
FROM UNNEST($1::uuid[], $2::text[], $3::bigint[], $4::bool[]) AS f(id, error, delay_ms, dead)
WHERE e.id = f.id AND e.processed_at IS NULL AND e.dead_lettered_at IS NULL
  AND EXISTS (SELECT 1 FROM {schema}.outbox_partitions p
              WHERE p.partition = {schema}.outbox_partition(e.aggregate_id) AND p.owner = $5
                AND p.epoch = ($6::bigint[])[{schema}.outbox_partition(e.aggregate_id) + 1])";

/// Refreshes this instance's heartbeat (`$2`), forgets long-gone
/// instances, and returns the instances seen within the lease (`$1` ms),
/// this one included, sorted: one round trip per lease round. The select
/// reads the table as it was before the statement (the common-table
/// expressions' changes are not visible to it), so this instance is added
/// by name, not read back; the heartbeat and the deletion never touch the
/// same row.
pub const INSTANCE_HEARTBEAT_AND_LIVE: &str = "
WITH beat AS (
    INSERT INTO {schema}.outbox_relay_instances (instance_id, heartbeat_at) VALUES ($2, now())
    ON CONFLICT (instance_id) DO UPDATE SET heartbeat_at = now()),
gone AS (
    DELETE FROM {schema}.outbox_relay_instances
    WHERE heartbeat_at < now() - 10 * $1 * interval '1 millisecond' AND instance_id <> $2)
SELECT instance_id::text FROM {schema}.outbox_relay_instances
WHERE heartbeat_at >= now() - $1 * interval '1 millisecond' AND instance_id <> $2
UNION SELECT $2::text
ORDER BY 1";

/// A relay is about to sleep: producers' wake-up trigger (migration 7)
/// notifies until the time this sets, `$1` ms from now (refreshed while the
/// relay sleeps, so a relay that died stops costing producers once it
/// lapses). Never moves the time back: another relay may sleep longer.
///
/// A sequence, not a row: `setval` writes in place, so flipping between
/// busy and idle hundreds of times a second leaves no row versions behind
/// for claims and producers to walk while something holds the xmin back,
/// and every session sees the new time at once, whatever its snapshot. Not
/// flushed to disk (`synchronous_commit` off for this statement): a lost
/// announcement only leaves pick-ups to the poll.
pub const IDLE_ANNOUNCE: &str = "
SELECT setval('{schema}.outbox_relay_idle_until',
              greatest(coalesce(pg_sequence_last_value('{schema}.outbox_relay_idle_until'), 0),
                       (date_part('epoch', now()) * 1000)::bigint + $1::bigint))
FROM (SELECT set_config('synchronous_commit', 'off', true)) AS unflushed";

/// A transaction id assigned now, after [`IDLE_ANNOUNCE`] has returned.
/// The trigger takes a producer's id before it reads the time, so a
/// producer that read it before the announcement has an id below this one:
/// once every transaction below it has ended, each such insert has
/// committed, and one more look finds it. (Not the announcement's own id:
/// `setval` takes one before it writes. Not a snapshot's `xmax`: a writer
/// that took its id earlier and is still running can be at or above it.)
pub const TRANSACTION_ID_NEW: &str = "
SELECT pg_current_xact_id()::text::bigint
FROM (SELECT set_config('synchronous_commit', 'off', true)) AS unflushed";

/// Whether every transaction of this database below `$1` has ended (see
/// [`SNAPSHOT_XMIN_HERE`], waiting for `$1`).
pub const TRANSACTIONS_ENDED_BELOW: &str = "SELECT {xmin} >= $1";

/// The `{xmin}` of [`EVENT_ACK_AND_CLAIM`] while nothing holds the
/// snapshot's xmin below what the cursor waits for (the common case), and
/// its `{xmin_plain}` always: the snapshot's own `xmin`. Every transaction
/// below it, in any database, had ended, so it never lets the cursor pass
/// a row; it only holds the cursor back while a transaction in another
/// database is running, and then the store switches to
/// [`SNAPSHOT_XMIN_HERE`] until the plain one reaches what the cursor
/// waits for again. Kept apart because that one's plan (two joins over
/// `pg_stat_activity`, `pg_prepared_xacts` and `pg_database`) is set up at
/// every execution even where its branch is not taken: measured, about a
/// third of the PostgreSQL CPU of a claim at 500 events/s went to setting
/// up the claim's plan.
pub const SNAPSHOT_XMIN_PLAIN: &str =
    "(SELECT pg_snapshot_xmin(pg_current_snapshot())::text::bigint)";

/// The `{xmin}` of [`EVENT_ACK_AND_CLAIM`] and [`TRANSACTIONS_ENDED_BELOW`]:
/// a transaction id below which every transaction of *this database* had
/// ended when the statement's snapshot was taken, so their rows are visible
/// to the statement (or gone). `{waiting_for}` is the parameter holding the
/// id the caller needs it to reach.
///
/// The snapshot's own `xmin` when that reaches `{waiting_for}` (the common
/// case, and cheap). Otherwise the oldest running id of the snapshot that
/// is not known to run in another database, or the snapshot's `xmax` if
/// none is: a transaction elsewhere (a report, a migration, another
/// service's batch on the same cluster) cannot write to this outbox and
/// must not hold the relay's claim cursor back. The running ids are matched
/// (by their low 32 bits) with `pg_stat_activity` and `pg_prepared_xacts`,
/// read after the snapshot; an id found in neither (it ended meanwhile)
/// still counts, which can only hold the cursor back a claim longer, never
/// let it pass a row. Reading those views costs 70-120 µs, hence the cheap
/// case first.
pub const SNAPSHOT_XMIN_HERE: &str = "(SELECT CASE WHEN plain.xmin >= {waiting_for} THEN plain.xmin
    ELSE (SELECT coalesce(
        (SELECT min(x::text::bigint) FROM pg_snapshot_xip(pg_current_snapshot()) AS x
         WHERE x::text::bigint % 4294967296 NOT IN (
             SELECT backend_xid::text::bigint FROM pg_stat_activity
             WHERE backend_xid IS NOT NULL AND datname IS DISTINCT FROM current_database()
             UNION ALL
             SELECT transaction::text::bigint FROM pg_prepared_xacts
             WHERE database <> current_database())),
        pg_snapshot_xmax(pg_current_snapshot())::text::bigint)) END
  FROM (SELECT pg_snapshot_xmin(pg_current_snapshot())::text::bigint AS xmin) AS plain)";

/// Whether the schema's idle wake-up trigger is installed (a relay announces
/// itself idle only then).
pub const IDLE_TRIGGER_INSTALLED: &str = "
SELECT EXISTS (SELECT 1 FROM pg_trigger
               WHERE tgname = 'outbox_wake_idle_relay'
                 AND tgrelid = '{schema}.outbox_events'::regclass)";

/// The only live relay has work again (or is stopping): producers stop
/// notifying. A relay with others beside it leaves the time to lapse
/// instead, since one of them may be asleep.
pub const IDLE_RETRACT: &str = "
SELECT setval('{schema}.outbox_relay_idle_until', 0)
FROM (SELECT set_config('synchronous_commit', 'off', true)) AS unflushed";

/// A stopping instance leaves.
pub const INSTANCE_REMOVE: &str = "
DELETE FROM {schema}.outbox_relay_instances WHERE instance_id = $1";

/// Extends the leases this instance holds; returns the ones still held.
pub const PARTITION_LEASE_RENEW: &str = "
UPDATE {schema}.outbox_partitions
SET lease_until = now() + $3 * interval '1 millisecond'
WHERE owner = $1 AND partition = ANY($2::int[]) AND lease_until > now()
RETURNING partition, epoch";

/// Takes free or expired partitions (or this instance's own, after a
/// restart), bumping the fencing epoch.
pub const PARTITION_LEASE_ACQUIRE: &str = "
UPDATE {schema}.outbox_partitions
SET owner = $1, epoch = epoch + 1, lease_until = now() + $3 * interval '1 millisecond'
WHERE partition = ANY($2::int[])
  AND (owner IS NULL OR owner = $1 OR lease_until IS NULL OR lease_until < now())
RETURNING partition, epoch";

/// Asks every relay listening on the schema's channel to run a lease round
/// now (sent when an instance joins or leaves).
pub const REBALANCE_NOTIFY: &str = "SELECT pg_notify($1, 'rebalance')";

/// The payload of a rebalance notification.
pub const REBALANCE_PAYLOAD: &str = "rebalance";

/// The payload the pauses' trigger (migration 15) sends on the schema's
/// channel when a pause is added or lifted.
pub const PAUSES_PAYLOAD: &str = "pauses";

/// What is paused, for a source that does not claim rows (the WAL
/// reader): one row per pause, `NULL` for the whole outbox. The pause that
/// `outbox migrate --mode table` holds while the slot is read to its mark
/// is not one: it holds the table's rows back behind the slot's events,
/// which the reader is there to publish; unless it took over an operator's
/// pause of the whole outbox (`[kept: …]`), which still holds.
pub const PAUSES_HELD: &str = "
SELECT aggregate_type::text FROM {schema}.outbox_pauses
WHERE aggregate_type IS NOT NULL OR paused_by NOT LIKE 'outbox migrate --mode table:%'
   OR paused_by LIKE 'outbox migrate --mode table:% [kept: %]'";

/// Gives partitions up so another instance can take them at once.
pub const PARTITION_RELEASE: &str = "
UPDATE {schema}.outbox_partitions SET owner = NULL, lease_until = NULL
WHERE owner = $1 AND partition = ANY($2::int[])";

/// The number of partitions.
pub const PARTITION_COUNT: &str = "SELECT count(*)::int FROM {schema}.outbox_partitions";
