-- The table delivery mode, the default: `outbox_emit` inserts the event's
-- row (the table's checks refuse what they refuse), and a plain INSERT is
-- stored as it always was. Installed after migration 13 and by `outbox
-- migrate --mode table`; undoes migrations/wal_mode_on.sql.
-- The signature repeats wal_mode_on.sql's on purpose: CREATE OR REPLACE
-- keeps a function only under the same one, and producers call it by it.
DROP TRIGGER IF EXISTS outbox_events_to_wal ON {schema}.outbox_events;

CREATE OR REPLACE FUNCTION {schema}.outbox_emit(
    aggregate_type text,
    aggregate_id text,
    event_type text,
    payload jsonb,
    headers jsonb DEFAULT '{}',
    topic text DEFAULT NULL,
    id uuid DEFAULT NULL)
RETURNS uuid LANGUAGE plpgsql AS $$
BEGIN
    id := coalesce(id, {schema}.outbox_uuid7());
    INSERT INTO {schema}.outbox_events
        (id, aggregate_type, aggregate_id, event_type, payload, headers, topic)
    VALUES (outbox_emit.id, outbox_emit.aggregate_type, outbox_emit.aggregate_id,
            outbox_emit.event_type, outbox_emit.payload, outbox_emit.headers,
            outbox_emit.topic);
    RETURN id;
END;
$$;


-- Whoever may INSERT into outbox_events may call it again (the WAL mode
-- took EXECUTE from PUBLIC, and CREATE OR REPLACE keeps a function's
-- rights): the INSERT inside checks the caller's right, as it always did.
GRANT EXECUTE ON FUNCTION {schema}.outbox_emit(text, text, text, jsonb, jsonb, text, uuid) TO PUBLIC;
