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
/// slot to be confirmed to.
pub const WAL_END: &str = "SELECT pg_current_wal_lsn()::text";

/// Whether the schema's slot is confirmed to `$1` (an LSN as text): every
/// message written before it is delivered, or set aside in the table. True
/// for a schema without a slot, or whose slot is gone (nothing more can be
/// read from it).
pub const SLOT_CONFIRMED_TO: &str = "
SELECT coalesce((SELECT s.confirmed_flush_lsn >= $1::text::pg_lsn
                 FROM {schema}.outbox_wal w
                 JOIN pg_replication_slots s ON s.slot_name = w.slot_name), true)";
