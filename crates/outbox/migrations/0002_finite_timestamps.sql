-- Timestamps a client can read: finite and before year 100000. Rows with
-- `infinity` (or year 294276) could be inserted by plain SQL before this
-- migration; no client library can represent them. Existing rows are not
-- checked (NOT VALID): the relay dead-letters such a row with the reason
-- instead, and an old row with an unreadable created_at may still be
-- dead-lettered, since that is the one change made to it.
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_constraint
                   WHERE conname = 'outbox_events_finite_times'
                     AND conrelid = '{schema}.outbox_events'::regclass) THEN
        ALTER TABLE {schema}.outbox_events ADD CONSTRAINT outbox_events_finite_times CHECK (
            ((isfinite(created_at) AND created_at < '100000-01-01')
                 OR dead_lettered_at IS NOT NULL)
            AND (processed_at IS NULL
                 OR (isfinite(processed_at) AND processed_at < '100000-01-01'))
            AND (next_attempt_at IS NULL
                 OR (isfinite(next_attempt_at) AND next_attempt_at < '100000-01-01'))
            AND (dead_lettered_at IS NULL
                 OR (isfinite(dead_lettered_at) AND dead_lettered_at < '100000-01-01'))
        ) NOT VALID;
    END IF;
END $$;
