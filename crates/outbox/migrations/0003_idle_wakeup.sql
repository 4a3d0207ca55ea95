-- Wake-up for producers that know nothing about the relay (plain SQL from
-- any language), at no cost while the relay is busy.
--
-- A relay about to sleep announces it here (idle_until: it refreshes the
-- row while it sleeps, so a relay that died stops counting once it lapses).
-- A statement-level trigger sends one NOTIFY per inserting statement only
-- while some relay is idle; the relay retracts its row as soon as it has
-- work, so under load no committing transaction takes PostgreSQL's global
-- notify lock. The relay looks once more after announcing, and keeps its
-- poll as a fallback, so a signal that races with the announcement costs at
-- most one poll interval.
CREATE TABLE IF NOT EXISTS {schema}.outbox_relay_idle (
    instance_id TEXT        PRIMARY KEY,
    idle_until  TIMESTAMPTZ NOT NULL
);

CREATE OR REPLACE FUNCTION {schema}.outbox_wake_idle_relay() RETURNS trigger AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM {schema}.outbox_relay_idle WHERE idle_until > now()) THEN
        PERFORM pg_notify('{channel}', '');
    END IF;
    RETURN NULL;
END;
$$ LANGUAGE plpgsql;

-- The default mode, unless the schema chose the seed's per-row trigger.
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_trigger
                   WHERE tgname IN ('outbox_insert_notify', 'outbox_wake_idle_relay')
                     AND tgrelid = '{schema}.outbox_events'::regclass) THEN
        CREATE TRIGGER outbox_wake_idle_relay
        AFTER INSERT ON {schema}.outbox_events
        FOR EACH STATEMENT EXECUTE FUNCTION {schema}.outbox_wake_idle_relay();
    END IF;
END $$;
