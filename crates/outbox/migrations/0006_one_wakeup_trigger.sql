-- One trigger call per INSERT statement where there were two, and a BEFORE
-- trigger where there was an AFTER one: what producers pay for the default
-- wake-up. Measured per INSERT statement (a loop of single-row inserts in
-- one backend, docs/performance.md): the two triggers added 23-24 µs to an
-- insert of 24-25 µs; this one adds 11-14 µs.
--
-- In the default (idle) mode, the wake-up trigger now also takes the
-- transaction id before any row draws its seq (migration 4's invariant,
-- which the claim cursor depends on), so `outbox_xid_first` is dropped
-- there; the other modes keep it (see `migrate.rs`). A NOTIFY queued before
-- the rows is sent at commit all the same, and dropped with them if the
-- statement or its transaction fails.
CREATE OR REPLACE FUNCTION {schema}.outbox_wake_idle_relay() RETURNS trigger AS $$
BEGIN
    PERFORM pg_current_xact_id();
    IF EXISTS (SELECT 1 FROM {schema}.outbox_relay_idle WHERE idle_until > now()) THEN
        PERFORM pg_notify('{channel}', '');
    END IF;
    RETURN NULL;
END;
$$ LANGUAGE plpgsql;

DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_trigger
               WHERE tgname = 'outbox_wake_idle_relay'
                 AND tgrelid = '{schema}.outbox_events'::regclass) THEN
        DROP TRIGGER outbox_wake_idle_relay ON {schema}.outbox_events;
        CREATE TRIGGER outbox_wake_idle_relay
        BEFORE INSERT ON {schema}.outbox_events
        FOR EACH STATEMENT EXECUTE FUNCTION {schema}.outbox_wake_idle_relay();
        DROP TRIGGER IF EXISTS outbox_xid_first ON {schema}.outbox_events;
    END IF;
END $$;
