-- Opt-in compatibility with the seed: a NOTIFY per inserted row. It takes
-- PostgreSQL's global notify lock at every commit and serialises producers.
CREATE OR REPLACE FUNCTION {schema}.notify_outbox_insert() RETURNS trigger AS $$
BEGIN
    PERFORM pg_notify('{channel}', NEW.id::text);
    RETURN NEW;
END;
$$ LANGUAGE plpgsql;

DROP TRIGGER IF EXISTS outbox_insert_notify ON {schema}.outbox_events;
CREATE TRIGGER outbox_insert_notify
AFTER INSERT ON {schema}.outbox_events
FOR EACH ROW EXECUTE FUNCTION {schema}.notify_outbox_insert();
