-- The wake-up functions with the schema's channel as `Schema::channel`
-- derives it: at most 63 bytes for every schema name, so `pg_notify` never
-- fails a producer's INSERT with "channel name too long". For a schema of
-- up to 50 characters the channel is unchanged and this is a no-op; the
-- every-insert trigger's function is rendered again by the migration step
-- that reinstalls the schema's wake-up mode.
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
