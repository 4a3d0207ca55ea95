//! The WAL delivery mode's statements: what `outbox migrate --mode wal`
//! checks and creates on the server, and the mode's producer calls.

/// The server settings and the role's rights the WAL mode needs, read
/// before anything is changed: `wal_level`, `max_replication_slots` and the
/// slots in use, `max_wal_senders`, whether the current role may
/// replicate (`REPLICATION` or superuser: both creating a slot and the
/// relay's replication connection need it), slot `$1` if it exists, the
/// database, and its encoding (messages arrive in it; the relay reads
/// UTF-8).
pub const WAL_PREFLIGHT: &str = "
SELECT current_setting('wal_level'),
       current_setting('max_replication_slots')::int,
       (SELECT count(*)::int FROM pg_replication_slots),
       current_setting('max_wal_senders')::int,
       (SELECT rolreplication OR rolsuper FROM pg_roles WHERE rolname = current_user),
       current_user::text,
       (SELECT slot_type || ' ' || coalesce(plugin, '') || ' ' || coalesce(database, '')
        FROM pg_replication_slots WHERE slot_name = $1),
       current_database()::text,
       current_setting('server_encoding')";

/// Creates the logical slot `$1` with `pgoutput`. Must run in a
/// transaction that has written nothing (PostgreSQL's rule); waits for the
/// transactions running at that moment to end, so every message committed
/// after it returns is in the slot.
pub const WAL_SLOT_CREATE: &str =
    "SELECT lsn::text FROM pg_create_logical_replication_slot($1, 'pgoutput')";

/// Whether a slot named `$1` belongs to another database of the server,
/// and this database's name.
pub const WAL_SLOT_IN_OTHER_DATABASE: &str = "
SELECT EXISTS (SELECT FROM pg_replication_slots
               WHERE slot_name = $1 AND database IS DISTINCT FROM current_database()),
       current_database()::text";

/// This database's name and encoding.
pub const DATABASE_ENCODING: &str =
    "SELECT current_database()::text, current_setting('server_encoding')";

/// Whether replication slot `$1` exists.
pub const WAL_SLOT_EXISTS: &str =
    "SELECT EXISTS (SELECT FROM pg_replication_slots WHERE slot_name = $1)";

/// Whether publication `$1` exists. `pgoutput` needs one to start, even
/// though messages pass whatever it publishes.
pub const WAL_PUBLICATION_EXISTS: &str =
    "SELECT EXISTS (SELECT FROM pg_publication WHERE pubname = $1)";

/// Records the schema's slot and publication for the relay (one row).
pub const WAL_SLOT_RECORD: &str = "
INSERT INTO {schema}.outbox_wal (slot_name, publication) VALUES ($1, $2)
ON CONFLICT (one) DO UPDATE SET slot_name = EXCLUDED.slot_name,
                                publication = EXCLUDED.publication,
                                created_at = now(),
                                switch_seq_next = NULL, switch_seq_end = NULL,
                                switch_mark_lsn = NULL, confirmed_lsn = NULL";

/// Saves where the relay has confirmed the slot (`$1`, an LSN as text):
/// the next session starts there even if the server forgot the slot's own
/// confirmed position in a restart. Never moves it back. Not flushed: a
/// lost save only means more events read again.
pub const WAL_CONFIRMED_SAVE: &str = "
UPDATE {schema}.outbox_wal SET confirmed_lsn = $1::text::pg_lsn
WHERE (confirmed_lsn IS NULL OR confirmed_lsn < $1::text::pg_lsn)
  AND (SELECT set_config('synchronous_commit', 'off', true)) IS NOT NULL";

/// Where the relay last saved its confirmed position, as text.
pub const WAL_CONFIRMED_SAVED: &str = "SELECT confirmed_lsn::text FROM {schema}.outbox_wal";

/// The schema's recorded slot and publication, if it has been in the WAL
/// mode.
pub const WAL_SLOT_RECORDED: &str = "SELECT slot_name, publication FROM {schema}.outbox_wal";

/// Whether schema `$1` is in the WAL mode: its capture trigger exists.
pub const WAL_MODE_INSTALLED: &str = "
SELECT EXISTS (
    SELECT FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
      JOIN pg_namespace n ON n.oid = c.relnamespace
     WHERE t.tgname = 'outbox_events_to_wal' AND n.nspname = $1
       AND c.relname = 'outbox_events')";

/// One event through `outbox_emit`, with every argument (the library
/// passes its own time-ordered id).
pub const EVENT_EMIT_ONE: &str = "SELECT {schema}.outbox_emit($1, $2, $3, $4, $5, $6, $7)";

/// Many events through `outbox_emit` in one statement, emitted in the
/// given order (the function scan yields the arrays' order).
pub const EVENT_EMIT_MANY: &str = "
SELECT {schema}.outbox_emit(aggregate_type, aggregate_id, event_type, payload::jsonb,
                            headers::jsonb, topic, id)
FROM UNNEST($1::uuid[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[])
     AS e(id, aggregate_type, aggregate_id, event_type, payload, headers, topic)";

/// The aggregates with an event waiting in the table (pending, or retrying
/// after a failure): the WAL reader sets their later events aside behind
/// it, so none overtakes. Read when a reader starts; few rows, read through
/// the unprocessed index's predicate.
pub const WAL_AGGREGATES_PENDING: &str = "
SELECT DISTINCT aggregate_id::text FROM {schema}.outbox_events
WHERE processed_at IS NULL AND dead_lettered_at IS NULL";

/// Which of the aggregates `$1` still have an event waiting in the table.
pub const WAL_AGGREGATES_PENDING_AMONG: &str = "
SELECT DISTINCT aggregate_id::text FROM {schema}.outbox_events
WHERE processed_at IS NULL AND dead_lettered_at IS NULL AND aggregate_id = ANY($1::text[])";

/// Stores events the WAL reader sets aside as rows, in the order given (so
/// in `seq` order; after a switch back to the table mode, with seq values
/// from the range the switch kept, below every row written after it): a failed one retrying after its backoff
/// (`$10` ms, attempts counted), a dead letter (`$12`), or one held behind
/// an earlier event of its aggregate (no attempt, no delay). From then on
/// the table's retries, dead letters and tools apply to it. An id already
/// stored (the stream read again after a restart) is left as it is. Run
/// after `SET LOCAL outbox.table_write = 'on'`, which the WAL mode's
/// capture trigger lets through.
pub const WAL_EVENTS_SET_ASIDE: &str = "
WITH kept AS (
    UPDATE {schema}.outbox_wal SET switch_seq_next = switch_seq_next + cardinality($1::uuid[])
    WHERE switch_seq_next + cardinality($1::uuid[]) <= switch_seq_end
    RETURNING switch_seq_next - cardinality($1::uuid[]) AS first)
INSERT INTO {schema}.outbox_events
    (seq, id, aggregate_type, aggregate_id, event_type, payload, headers, topic, created_at,
     attempts, next_attempt_at, last_error, dead_lettered_at)
OVERRIDING SYSTEM VALUE
SELECT coalesce((SELECT first FROM kept) + ord - 1,
                nextval(pg_get_serial_sequence('{schema}.outbox_events', 'seq'))),
       id, aggregate_type, aggregate_id, event_type, payload::jsonb, headers::jsonb, topic,
       created_at, attempts,
       CASE WHEN NOT dead AND delay_ms IS NOT NULL
            THEN now() + delay_ms * interval '1 millisecond' END,
       last_error, CASE WHEN dead THEN now() END
FROM UNNEST($1::uuid[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[],
            $8::timestamptz[], $9::int[], $10::bigint[], $11::text[], $12::bool[])
     WITH ORDINALITY AS e(id, aggregate_type, aggregate_id, event_type, payload, headers, topic,
                          created_at, attempts, delay_ms, last_error, dead, ord)
ORDER BY ord
ON CONFLICT (id) DO NOTHING";

/// Fences what a slot's reader writes, for the transaction: takes the
/// slot's lock shared (`$1`, the slot), then says whether the session of
/// walsender `$2` still holds the slot. A reader whose session ended (the
/// server freed the slot, another reader may hold it now) writes nothing;
/// a new reader reads the table under the same lock, exclusive
/// ([`WAL_READER_TAKEOVER`]), so it sees every set-aside committed before
/// it took the slot, and none commits after.
pub const WAL_READER_FENCE: &str = "
SELECT EXISTS (SELECT FROM pg_replication_slots WHERE slot_name = $1 AND active_pid = $2)
FROM (SELECT pg_advisory_xact_lock_shared(hashtextextended('outbox.wal.' || $1, 0))) AS locked";

/// A new reader's side of [`WAL_READER_FENCE`]: the slot's lock, exclusive,
/// for the transaction in which it reads the aggregates waiting in the
/// table.
pub const WAL_READER_TAKEOVER: &str =
    "SELECT pg_advisory_xact_lock(hashtextextended('outbox.wal.' || $1, 0))";

/// Lets the relay's own rows through the WAL mode's capture trigger, for
/// the transaction.
pub const WAL_TABLE_WRITE: &str = "SET LOCAL outbox.table_write = 'on'";

/// The pause that holds the table's rows back while the slot is read to
/// the switch back to the table mode (`paused_by` names it, so a pause of
/// the operator's is never taken for it). Written by `outbox migrate --mode
/// table` with [`WAL_SWITCH_MARK`], in the transaction that switches.
///
/// An operator's pause of the whole outbox already in force is taken over,
/// its `paused_by` kept in brackets: no *Resume* can lift it before the slot
/// is read (the console's leaves the switch's pause alone), and
/// [`WAL_SWITCH_DONE`] gives it back as it was.
pub const WAL_SWITCH_PAUSE: &str = "
INSERT INTO {schema}.outbox_pauses AS p (aggregate_type, paused_by)
VALUES (NULL, 'outbox migrate --mode table: until the relay has read the slot to the switch')
ON CONFLICT ((aggregate_type IS NULL), (coalesce(aggregate_type, ''))) DO UPDATE
SET paused_by = EXCLUDED.paused_by || ' [kept: ' || p.paused_by || ']'
WHERE p.paused_by NOT LIKE 'outbox migrate --mode table:%'";

/// Keeps a range of 10^12 seq values for the events the relay sets aside
/// while it reads the slot to the switch (`WAL_EVENTS_SET_ASIDE`): every
/// row written after the switch comes after them. No slot holds that many
/// events, so the range never runs out (a sequence's gaps cost nothing,
/// and a `bigint` holds nine million such ranges).
pub const WAL_SWITCH_KEEP_SEQS: &str = "
WITH r AS (SELECT nextval(pg_get_serial_sequence('{schema}.outbox_events', 'seq')) AS first)
UPDATE {schema}.outbox_wal SET switch_seq_next = r.first,
    switch_seq_end = setval(pg_get_serial_sequence('{schema}.outbox_events', 'seq'),
                            r.first + 1000000000000)
FROM r";

/// The switch's mark in the stream, and where it is: written once every
/// transaction older than the switch has ended, so every event emitted
/// through the WAL mode's `outbox_emit` is before it. The relay ends the
/// switch once it has confirmed the slot to `switch_mark_lsn`, and obeys no
/// other mark. `$1` is the schema's prefix, `$2` the mark. Writes nothing
/// unless a switch waits for its mark.
pub const WAL_SWITCH_MARK: &str = "
UPDATE {schema}.outbox_wal SET switch_mark_lsn = pg_logical_emit_message(true, $1, $2)
WHERE switch_seq_next IS NOT NULL AND switch_mark_lsn IS NULL
RETURNING switch_mark_lsn::text";

/// The switch back to the table mode, as `migrate` and the relay see it:
/// whether one is in progress, and its mark's position once written.
pub const WAL_SWITCH_STATE: &str = "
SELECT switch_seq_next IS NOT NULL, switch_mark_lsn::text FROM {schema}.outbox_wal";

/// The pending switch's mark, and whether the slot is already confirmed to
/// it (by the server, or as the relay saved it): a relay that stopped after
/// confirming the mark but before ending the switch ends it at its next
/// start. No row while no mark is pending.
pub const WAL_SWITCH_MARK_REACHED: &str = "
SELECT w.switch_mark_lsn::text,
       coalesce(greatest(s.confirmed_flush_lsn, w.confirmed_lsn) >= w.switch_mark_lsn, false)
FROM {schema}.outbox_wal w
LEFT JOIN pg_replication_slots s ON s.slot_name = w.slot_name
WHERE w.switch_seq_next IS NOT NULL AND w.switch_mark_lsn IS NOT NULL";

/// Every transaction open in this database now, but this session's: the
/// virtual transaction id of each (every transaction holds its own), and
/// the prepared transactions (they outlive their session). The switch to
/// the table mode waits for all of them to end before writing its mark, as
/// `CREATE INDEX CONCURRENTLY` waits for older snapshots.
pub const OLDER_TRANSACTIONS: &str = "
SELECT coalesce(array_agg(l.virtualxid), '{}')::text[],
       (SELECT coalesce(array_agg(gid), '{}') FROM pg_prepared_xacts
         WHERE database = current_database())::text[]
FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
WHERE l.locktype = 'virtualxid' AND l.mode = 'ExclusiveLock' AND l.granted
  AND l.pid <> pg_backend_pid() AND a.datname = current_database()";

/// Which of the transactions `$1` (virtual ids) and `$2` (prepared) are
/// still open, each with its session's pid (NULL for a prepared one), its
/// application name (a prepared one's gid), its state and its age in
/// seconds, oldest first.
pub const OLDER_TRANSACTIONS_LEFT: &str = "
SELECT a.pid, coalesce(a.application_name, ''), coalesce(a.state, ''),
       coalesce(EXTRACT(EPOCH FROM now() - a.xact_start), 0)::float8 AS age
FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
WHERE l.locktype = 'virtualxid' AND l.mode = 'ExclusiveLock' AND l.granted
  AND l.virtualxid = ANY($1::text[])
UNION ALL
SELECT NULL, gid, 'prepared', EXTRACT(EPOCH FROM now() - prepared)::float8
FROM pg_prepared_xacts WHERE gid = ANY($2::text[]) AND database = current_database()
ORDER BY age DESC";

/// What became of slot `$1`: `NULL` when it does not exist, else its
/// `wal_status` (`lost` once `max_slot_wal_keep_size` invalidated it).
pub const WAL_SLOT_HEALTH: &str = "
SELECT coalesce(wal_status, 'unknown') FROM pg_replication_slots WHERE slot_name = $1";

/// Who publication `$1` (the slot's twin) was created for: its comment,
/// `outbox:<schema>` when `outbox migrate --mode wal` created it.
pub const WAL_PUBLICATION_OWNER: &str = "
SELECT obj_description(oid, 'pg_publication') FROM pg_publication WHERE pubname = $1";

/// The other schemas of this database that have recorded a WAL-mode slot
/// (their `outbox_wal` tables), for `$1` the migrating schema.
pub const WAL_OTHER_SCHEMAS: &str = "
SELECT n.nspname::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE c.relname = 'outbox_wal' AND c.relkind = 'r' AND n.nspname <> $1";

/// Ends the switch once the relay has read the slot to its mark: lifts the
/// switch's pause, gives back an operator's pause it took over (as it was),
/// and forgets the slot.
pub const WAL_SWITCH_DONE: &str = "
WITH given_back AS (
    UPDATE {schema}.outbox_pauses
    SET paused_by = substring(paused_by FROM ' \\[kept: (.*)\\]$')
    WHERE aggregate_type IS NULL AND paused_by LIKE 'outbox migrate --mode table:% [kept: %]'),
lifted AS (
    DELETE FROM {schema}.outbox_pauses
    WHERE aggregate_type IS NULL AND paused_by LIKE 'outbox migrate --mode table:%'
      AND paused_by NOT LIKE 'outbox migrate --mode table:% [kept: %]')
DELETE FROM {schema}.outbox_wal";

/// Drops replication slot `$1` if it exists and no session reads it.
pub const WAL_SLOT_DROP: &str = "
SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots
WHERE slot_name = $1 AND NOT active";
