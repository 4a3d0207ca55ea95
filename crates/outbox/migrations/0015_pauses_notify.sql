-- A pause added or lifted is told on the schema's channel (payload
-- `pauses`), so that the WAL reader, which has no claim to skip paused
-- events, holds them from the next batch on. Pauses are rare: one NOTIFY
-- per statement, never on a producer's path.
CREATE OR REPLACE FUNCTION {schema}.outbox_pauses_changed() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('{channel}', 'pauses');
    RETURN NULL;
END;
$$;
DROP TRIGGER IF EXISTS outbox_pauses_changed ON {schema}.outbox_pauses;
CREATE TRIGGER outbox_pauses_changed
    AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON {schema}.outbox_pauses
    FOR EACH STATEMENT EXECUTE FUNCTION {schema}.outbox_pauses_changed();
