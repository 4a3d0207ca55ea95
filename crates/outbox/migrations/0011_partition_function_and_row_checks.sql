-- What a producer's INSERT still paid for beyond its row after migration
-- 9, cut again without giving up a rule. PostgreSQL reads a table's CHECK
-- constraints and its stored generated columns from their node trees at
-- every INSERT statement (ExecRelCheck, ExecInitStoredGenerated), so each
-- costs the producer in proportion to how long it is written; a domain's
-- constraints come from the type cache, planned once per session.
-- Measured with callgrind (scripts/callgrind-produce; instructions of the
-- backend per transaction of one `orders` row and one event, PostgreSQL
-- 15; docs/performance.md): 317k with migrations 1-10, 256k with this
-- one, 181k with a seed-like table. WAL per event: about that of the
-- seed-like row (the stored partition was 4 bytes of it).
--
-- * `partition` is no longer a stored generated column (its expression's
--   tree, 915 characters, cost ~35k instructions per INSERT statement).
--   `outbox_partition(aggregate_id)` computes the same number with the
--   same expression, for the relay's claims and for anyone who reads it;
--   the relay's filters never used an index on it, and still read the same
--   indexes. Statistics on the expression keep the planner's estimates.
--   The `outbox_dead_letters` view keeps its `partition` column.
-- * `seq > 0` (migration 8) and the finite processed, next-attempt and
--   dead-letter times (migrations 2 and 9) are the constraints of a domain
--   over the table's own row type, `outbox_row`, with the same constraint
--   names, so refusals read as before; the table keeps one short CHECK
--   that casts the new row to it (331 characters instead of 1,197). The
--   columns keep their types: changing theirs would rebuild the partial
--   indexes whose predicates name them. As before, the check covers every
--   inserted or updated row (NOT VALID: existing rows are not scanned).
-- * The idle wake-up trigger's function takes the transaction id by an
--   assignment (a plain expression) instead of a PERFORM (a query through
--   SPI), and sends its NOTIFY, as before, only while a relay sleeps.
--
-- Lock: ACCESS EXCLUSIVE on outbox_events for catalog changes only (the
-- column is dropped without a rewrite, the constraint added NOT VALID
-- without a scan, no index is built): measured on 1,000,000 rows (360
-- MB), the whole `outbox migrate` took 75 ms. Like any DDL it first waits
-- for transactions already using the table. Rows written
-- before keep the dropped column's bytes until they are deleted or
-- updated. A view of yours that reads `outbox_events.partition` stops the
-- drop ("cannot drop column partition of table outbox_events because other
-- objects depend on it"): drop it first and create it again after, reading
-- `outbox_partition(aggregate_id)`.
DO $$
BEGIN
    -- The same number the generated column held: the count of partitions
    -- is the one migration 1 created.
    EXECUTE format(
        'CREATE OR REPLACE FUNCTION {schema}.outbox_partition(aggregate_id text) RETURNS int
         LANGUAGE sql IMMUTABLE PARALLEL SAFE
         RETURN (hashtext(aggregate_id) & 2147483647) %% %s',
        (SELECT count(*) FROM {schema}.outbox_partitions));
END $$;

DROP VIEW IF EXISTS {schema}.outbox_dead_letters;
ALTER TABLE {schema}.outbox_events DROP COLUMN IF EXISTS partition;
CREATE VIEW {schema}.outbox_dead_letters AS
SELECT *, {schema}.outbox_partition(aggregate_id) AS partition
FROM {schema}.outbox_events
WHERE dead_lettered_at IS NOT NULL
  AND processed_at IS NULL
ORDER BY seq;

CREATE STATISTICS IF NOT EXISTS {schema}.outbox_events_partition
    ON ({schema}.outbox_partition(aggregate_id)) FROM {schema}.outbox_events;

DO $$
BEGIN
    IF to_regtype('{schema}.outbox_row') IS NULL THEN
        CREATE DOMAIN {schema}.outbox_row AS {schema}.outbox_events
            CONSTRAINT outbox_events_seq_positive CHECK ((VALUE).seq > 0)
            CONSTRAINT outbox_events_finite_marks CHECK (
                '(-infinity,100000-01-01)'::tstzrange
                    @> ALL (ARRAY[(VALUE).processed_at, (VALUE).next_attempt_at,
                                  (VALUE).dead_lettered_at]));
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_constraint
                   WHERE conname = 'outbox_events_row'
                     AND conrelid = '{schema}.outbox_events'::regclass) THEN
        -- `IS NULL` of a row is true only when every column is: never
        -- here, so the check is the cast, which the domain may refuse.
        ALTER TABLE {schema}.outbox_events ADD CONSTRAINT outbox_events_row
            CHECK (NOT (outbox_events::{schema}.outbox_row IS NULL)) NOT VALID;
    END IF;
END $$;
ALTER TABLE {schema}.outbox_events
    DROP CONSTRAINT IF EXISTS outbox_events_seq_positive,
    DROP CONSTRAINT IF EXISTS outbox_events_finite_marks;

CREATE OR REPLACE FUNCTION {schema}.outbox_wake_idle_relay() RETURNS trigger AS $$
DECLARE
    xid xid8;
BEGIN
    -- The transaction id before any row of the statement draws its seq.
    xid := pg_current_xact_id();
    IF pg_sequence_last_value('{schema}.outbox_relay_idle_until')
           > date_part('epoch', now()) * 1000 THEN
        PERFORM pg_notify('{channel}', '');
    END IF;
    RETURN NULL;
END;
$$ LANGUAGE plpgsql;
