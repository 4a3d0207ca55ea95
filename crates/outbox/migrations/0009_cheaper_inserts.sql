-- What a producer's INSERT costs beyond its row, cut without giving up a
-- check.
--
-- PostgreSQL reads a table's CHECK constraints, its generated columns and a
-- statement trigger's WHEN from their stored node trees at every INSERT
-- statement, prepared or not (ExecRelCheck, ExecInitStoredGenerated,
-- TriggerEnabled: stringToNode, then the expression is compiled), so their
-- cost grows with how long they are written, once per statement.
-- Measured with callgrind (instructions of the backend per transaction of
-- one `orders` row and one event, PostgreSQL 15, docs/performance.md):
-- 488k with migrations 1-8, 192k with a seed-like table; the finite-times
-- CHECK alone cost 130k, the idle trigger's WHEN 75k.
--
-- * `created_at` and `headers` take their checks from domains: a domain's
--   constraints are parsed once per session (the type cache) and only
--   compiled at each statement. The constraints keep their names, so the
--   refusals read as before. Only assigned values are checked: an UPDATE
--   that dead-letters an old row with an unreadable `created_at` (written
--   before migration 2) does not touch it. Neither column is in an index
--   or an index predicate, so the type change rewrites nothing.
-- * `processed_at`, `next_attempt_at` and `dead_lettered_at` keep a table
--   CHECK, written as one range test (a NULL passes, as before): half the
--   stored tree of a test per bound and column. Moving them into the
--   domain as well would rebuild the three partial indexes whose
--   predicates name them (measured: 1.9 s per million rows under this
--   migration's lock).
-- * The idle wake-up trigger runs its function at every statement, with
--   no WHEN: the function takes the transaction id first (migration 4's
--   invariant) and sends the NOTIFY only while a relay sleeps. A PL/pgSQL
--   call with cached plans costs less than parsing the WHEN each time
--   (28k against 75k instructions). `migrate` installs the schema's
--   wake-up mode again right after this migration.
--
-- Lock: ACCESS EXCLUSIVE on outbox_events for catalog changes only (no
-- rewrite, no index build, no scan: the constraints are added NOT VALID,
-- as migration 2's was). A view of yours that reads outbox_events' columns
-- stops the type change ("cannot alter type of a column used by a view"):
-- drop it first and create it again after.
DO $$
BEGIN
    IF to_regtype('{schema}.outbox_time') IS NULL THEN
        CREATE DOMAIN {schema}.outbox_time AS timestamptz;
    END IF;
    IF to_regtype('{schema}.outbox_headers') IS NULL THEN
        CREATE DOMAIN {schema}.outbox_headers AS jsonb;
    END IF;
END $$;

DROP VIEW IF EXISTS {schema}.outbox_dead_letters;
ALTER TABLE {schema}.outbox_events
    ALTER COLUMN created_at TYPE {schema}.outbox_time,
    ALTER COLUMN headers TYPE {schema}.outbox_headers;
CREATE VIEW {schema}.outbox_dead_letters AS
SELECT *
FROM {schema}.outbox_events
WHERE dead_lettered_at IS NOT NULL
  AND processed_at IS NULL
ORDER BY seq;

DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_constraint
                   WHERE conname = 'outbox_events_finite_times'
                     AND contypid = '{schema}.outbox_time'::regtype) THEN
        ALTER DOMAIN {schema}.outbox_time ADD CONSTRAINT outbox_events_finite_times
            CHECK (VALUE > '-infinity' AND VALUE < '100000-01-01') NOT VALID;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_constraint
                   WHERE conname = 'outbox_events_headers_object'
                     AND contypid = '{schema}.outbox_headers'::regtype) THEN
        ALTER DOMAIN {schema}.outbox_headers ADD CONSTRAINT outbox_events_headers_object
            CHECK (jsonb_typeof(VALUE) = 'object') NOT VALID;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_constraint
                   WHERE conname = 'outbox_events_finite_marks'
                     AND conrelid = '{schema}.outbox_events'::regclass) THEN
        ALTER TABLE {schema}.outbox_events ADD CONSTRAINT outbox_events_finite_marks CHECK (
            '(-infinity,100000-01-01)'::tstzrange
                @> ALL (ARRAY[processed_at, next_attempt_at, dead_lettered_at])
        ) NOT VALID;
    END IF;
END $$;
ALTER TABLE {schema}.outbox_events
    DROP CONSTRAINT IF EXISTS outbox_events_finite_times,
    DROP CONSTRAINT IF EXISTS outbox_events_headers_object;

CREATE OR REPLACE FUNCTION {schema}.outbox_wake_idle_relay() RETURNS trigger AS $$
BEGIN
    -- The transaction id before any row of the statement draws its seq.
    PERFORM pg_current_xact_id();
    IF pg_sequence_last_value('{schema}.outbox_relay_idle_until')
           > date_part('epoch', now()) * 1000 THEN
        PERFORM pg_notify('{channel}', '');
    END IF;
    RETURN NULL;
END;
$$ LANGUAGE plpgsql;
