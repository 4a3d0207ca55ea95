//! The status report's statements (`outbox status`, `Status::read`, the
//! relay's `--drain`).

/// Pending (live, not dead-lettered) events left; for `--drain`.
pub const PENDING_COUNT: &str = "
SELECT count(*) FROM {schema}.outbox_events
WHERE processed_at IS NULL AND dead_lettered_at IS NULL";

/// The status report's counters. The oldest age leaves out `created_at`
/// values that are not finite (only rows older than migration 2 can hold
/// them): `now() - '-infinity'` is out of an interval's range.
pub const STATUS_COUNTS: &str = "
SELECT count(*) FILTER (WHERE dead_lettered_at IS NULL) AS pending,
       count(*) FILTER (WHERE dead_lettered_at IS NULL AND next_attempt_at IS NOT NULL) AS retrying,
       count(*) FILTER (WHERE dead_lettered_at IS NOT NULL) AS dead_letters,
       EXTRACT(EPOCH FROM now() - min(created_at) FILTER (
           WHERE dead_lettered_at IS NULL AND isfinite(created_at)))::float8
           AS oldest_pending_age_seconds
FROM {schema}.outbox_events
WHERE processed_at IS NULL";

/// The status report's partition owners.
pub const STATUS_PARTITIONS: &str = "
SELECT partition, owner, epoch,
       (EXTRACT(EPOCH FROM lease_until - now()) * 1000)::bigint AS lease_ms_left
FROM {schema}.outbox_partitions ORDER BY partition";

/// The WAL mode's slot, for the status report: its name, whether it exists
/// and a session reads it, the bytes of WAL from its confirmed position to
/// the server's (what the relay has still to read and confirm), the bytes
/// it keeps the server from removing (from its restart position), the lag
/// in seconds its walsender reports, whether a switch back to the table
/// waits for it, whether the server invalidated it, and whether the switch
/// still waits for transactions older than it. No row while the schema
/// has no slot.
pub const STATUS_SLOT: &str = "
SELECT w.slot_name, s.slot_name IS NOT NULL, coalesce(s.active, false),
       (pg_current_wal_lsn() - s.confirmed_flush_lsn)::bigint,
       (pg_current_wal_lsn() - s.restart_lsn)::bigint,
       EXTRACT(EPOCH FROM r.flush_lag)::float8,
       w.switch_seq_next IS NOT NULL,
       coalesce(s.wal_status = 'lost', false),
       w.switch_seq_next IS NOT NULL AND w.switch_mark_lsn IS NULL
FROM {schema}.outbox_wal w
LEFT JOIN pg_replication_slots s ON s.slot_name = w.slot_name
LEFT JOIN pg_stat_replication r ON r.pid = s.active_pid";

/// The server's WAL position now, as text: what `--drain` waits for the
/// slot to be confirmed to. The insert position, not the write position:
/// a commit that has returned under `synchronous_commit = off` may lie
/// past what has been written.
pub const WAL_END: &str = "SELECT pg_current_wal_insert_lsn()::text";

/// Whether the schema's slot is confirmed to `$1` (an LSN as text): every
/// message written before it is delivered, or set aside in the table. True
/// for a schema without a slot, or whose slot is gone (nothing more can be
/// read from it).
pub const SLOT_CONFIRMED_TO: &str = "
SELECT coalesce((SELECT s.confirmed_flush_lsn >= $1::text::pg_lsn
                 FROM {schema}.outbox_wal w
                 JOIN pg_replication_slots s ON s.slot_name = w.slot_name), true)";

/// Seconds the oldest claimable event has waited: one the relay could
/// claim now (live, its retry due, its aggregate type not paused, its
/// aggregate not held back by an earlier event waiting out a backoff),
/// measured from when it became claimable (`created_at`, or its due retry
/// time). Events waiting out a backoff or a pause, and those queued behind
/// them, wait on purpose and are left out. 0 when there is none. The one
/// definition `/metrics`, `outbox status` and the console read.
pub const OLDEST_CLAIMABLE_AGE: &str = "
SELECT coalesce(EXTRACT(EPOCH FROM now() - min(greatest(e.created_at, e.next_attempt_at)))::float8, 0)
FROM {schema}.outbox_events e
WHERE e.processed_at IS NULL AND e.dead_lettered_at IS NULL AND isfinite(e.created_at)
  AND (e.next_attempt_at IS NULL OR e.next_attempt_at <= now())
  AND NOT EXISTS (SELECT FROM {schema}.outbox_pauses p
                  WHERE p.aggregate_type IS NULL OR p.aggregate_type = e.aggregate_type)
  AND e.aggregate_id NOT IN (
      SELECT aggregate_id FROM {schema}.outbox_events
      WHERE next_attempt_at > now() AND next_attempt_at <= 'infinity'
        AND processed_at IS NULL AND dead_lettered_at IS NULL)";

/// Seconds since the oldest transaction still holding a snapshot (its
/// `backend_xmin`) in this database began, prepared transactions included;
/// 0 when none but this one. Rows deleted after it began cannot be
/// vacuumed, so a high-churn outbox table bloats behind it. Autovacuum
/// workers are left out: vacuum ignores their snapshots. Sessions of
/// other roles are visible only to a role with `pg_read_all_stats` (or a
/// superuser): without it, they are not counted.
pub const OLDEST_SNAPSHOT_AGE: &str = "
SELECT coalesce(EXTRACT(EPOCH FROM now() - min(began))::float8, 0) FROM (
    SELECT xact_start AS began FROM pg_stat_activity
    WHERE datname = current_database() AND backend_xmin IS NOT NULL
      AND pid <> pg_backend_pid() AND backend_type <> 'autovacuum worker'
    UNION ALL
    SELECT prepared FROM pg_prepared_xacts WHERE database = current_database()
) AS holders";

/// The pauses in force: one row each, `NULL` for the whole outbox.
pub const PAUSES_IN_FORCE: &str =
    "SELECT aggregate_type::text FROM {schema}.outbox_pauses ORDER BY aggregate_type NULLS FIRST";
