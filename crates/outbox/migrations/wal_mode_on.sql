-- The WAL delivery mode (`outbox migrate --mode wal`): an event is a
-- transactional logical message with the prefix {prefix}, decoded from the
-- schema's replication slot only if its transaction commits. No row, no
-- index entry, no claim, no delete.
--
-- `outbox_emit` refuses what the table refuses, with the table's messages
-- (naming the field): NOT NULL of the three names, the payload and the
-- headers; character varying(100) of the names, (255) of the topic; the
-- headers a JSON object (the domain check outbox_events_headers_object).
-- The checks are one small expression on the path that passes, since
-- PL/pgSQL sets up each expression again in every transaction and the
-- set-up costs by the node: one num_nulls for the five NOT NULLs, one
-- greatest of the byte lengths (read from each value's header; a topic
-- counts 155 bytes less, so the one bound is 100 for all), the headers'
-- type. What it lets through is always valid; what it stops may still be
-- (a name of 100 multibyte characters is over 100 bytes):
-- `outbox_emit_refuse` counts characters, raises the table's error for
-- what fails, and returns for what passes.
--
-- The message, as text: `<id> <created_at µs since 1970> ` then, for the
-- aggregate type, aggregate id, event type, topic and headers, `<bytes>
-- <value>` (the topic's length is `-` when it has none), then the payload
-- as jsonb prints it (the bytes the table mode publishes). The relay's
-- decoder (crates/outbox/src/wal/message.rs) reads exactly this.
CREATE OR REPLACE FUNCTION {schema}.outbox_emit_refuse(
    aggregate_type text, aggregate_id text, event_type text, payload jsonb,
    headers jsonb, topic text) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    names text[] := ARRAY['aggregate_type', 'aggregate_id', 'event_type'];
    vals text[] := ARRAY[aggregate_type, aggregate_id, event_type];
BEGIN
    FOR i IN 1..3 LOOP
        IF vals[i] IS NULL THEN
            RAISE EXCEPTION 'null value in column "%" of relation "outbox_events" violates not-null constraint', names[i]
                USING ERRCODE = 'not_null_violation', COLUMN = names[i], TABLE = 'outbox_events',
                      SCHEMA = '{schema}';
        END IF;
    END LOOP;
    IF payload IS NULL THEN
        RAISE EXCEPTION 'null value in column "payload" of relation "outbox_events" violates not-null constraint'
            USING ERRCODE = 'not_null_violation', COLUMN = 'payload', TABLE = 'outbox_events',
                  SCHEMA = '{schema}';
    END IF;
    IF headers IS NULL THEN
        RAISE EXCEPTION 'null value in column "headers" of relation "outbox_events" violates not-null constraint'
            USING ERRCODE = 'not_null_violation', COLUMN = 'headers', TABLE = 'outbox_events',
                  SCHEMA = '{schema}';
    END IF;
    FOR i IN 1..3 LOOP
        IF length(vals[i]) > 100 THEN
            RAISE EXCEPTION 'value too long for type character varying(100): % has % characters',
                    names[i], length(vals[i])
                USING ERRCODE = 'string_data_right_truncation', COLUMN = names[i],
                      TABLE = 'outbox_events', SCHEMA = '{schema}';
        END IF;
    END LOOP;
    IF length(topic) > 255 THEN
        RAISE EXCEPTION 'value too long for type character varying(255): topic has % characters', length(topic)
            USING ERRCODE = 'string_data_right_truncation', COLUMN = 'topic',
                  TABLE = 'outbox_events', SCHEMA = '{schema}';
    END IF;
    IF jsonb_typeof(headers) <> 'object' THEN
        -- The domain's name as PostgreSQL prints it in the table's
        -- message: schema-qualified only when not on the search path.
        RAISE EXCEPTION 'value for domain % violates check constraint "outbox_events_headers_object"',
                '{schema}.outbox_headers'::regtype
            USING ERRCODE = 'check_violation', CONSTRAINT = 'outbox_events_headers_object',
                  COLUMN = 'headers', DETAIL = format('headers is a JSON %s, not an object', jsonb_typeof(headers)),
                  SCHEMA = '{schema}';
    END IF;
END;
$$;

CREATE OR REPLACE FUNCTION {schema}.outbox_emit(
    aggregate_type text,
    aggregate_id text,
    event_type text,
    payload jsonb,
    headers jsonb DEFAULT '{}',
    topic text DEFAULT NULL,
    id uuid DEFAULT NULL)
RETURNS uuid LANGUAGE plpgsql AS $$
DECLARE
    head text;
    written pg_lsn;
BEGIN
    IF num_nulls(aggregate_type, aggregate_id, event_type, payload, headers) > 0
       OR greatest(octet_length(aggregate_type), octet_length(aggregate_id),
                   octet_length(event_type), octet_length(topic) - 155) > 100
       OR jsonb_typeof(headers) <> 'object' THEN
        PERFORM {schema}.outbox_emit_refuse(aggregate_type, aggregate_id, event_type,
                                             payload, headers, topic);
    END IF;
    id := coalesce(id, {schema}.outbox_uuid7());
    head := headers::text;
    written := pg_logical_emit_message(true, '{prefix}', concat(
        id, ' ', (date_part('epoch', now()) * 1000000)::int8, ' ',
        octet_length(aggregate_type), ' ', aggregate_type,
        octet_length(aggregate_id), ' ', aggregate_id,
        octet_length(event_type), ' ', event_type,
        coalesce(octet_length(topic)::text, '-'), ' ', topic,
        octet_length(head), ' ', head,
        payload));
    RETURN id;
END;
$$;

-- Who may publish: in the table mode, whoever may INSERT into
-- outbox_events (outbox_emit inserts as its caller). The WAL mode's
-- outbox_emit writes no row, so its EXECUTE is taken from PUBLIC and given
-- to exactly the roles that hold INSERT on the table now (run `outbox
-- migrate --mode wal` again after granting INSERT to a new producer role,
-- or grant EXECUTE on outbox_emit to it). A plain INSERT captured by the
-- trigger below calls outbox_emit as the inserting role, so those roles
-- keep working as they did.
REVOKE EXECUTE ON FUNCTION {schema}.outbox_emit(text, text, text, jsonb, jsonb, text, uuid) FROM PUBLIC;
DO $grant$
DECLARE
    r oid;
BEGIN
    FOR r IN SELECT DISTINCT a.grantee FROM pg_class c, aclexplode(c.relacl) a
             WHERE c.oid = '{schema}.outbox_events'::regclass AND a.privilege_type = 'INSERT'
    LOOP
        IF r = 0 THEN
            GRANT EXECUTE ON FUNCTION {schema}.outbox_emit(text, text, text, jsonb, jsonb, text, uuid) TO PUBLIC;
        ELSE
            EXECUTE format('GRANT EXECUTE ON FUNCTION {schema}.outbox_emit(text, text, text, jsonb, jsonb, text, uuid) TO %I',
                           pg_get_userbyid(r));
        END IF;
    END LOOP;
END;
$grant$;

-- A plain `INSERT INTO outbox_events` (the seed's producers, and any
-- written for the table mode) is captured, not stored: the row becomes the
-- same message `outbox_emit` writes, and the INSERT reports 0 rows
-- (RETURNING returns none). The relay's own writes to the table (events
-- it sets aside for retrying, rows moved from a slot) set
-- `outbox.table_write` for their transaction and are stored.
CREATE OR REPLACE FUNCTION {schema}.outbox_events_to_wal() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    emitted uuid;
BEGIN
    IF current_setting('outbox.table_write', true) = 'on' THEN
        RETURN NEW;
    END IF;
    emitted := {schema}.outbox_emit(NEW.aggregate_type, NEW.aggregate_id, NEW.event_type,
                                    NEW.payload, NEW.headers, NEW.topic, NEW.id);
    RETURN NULL;
END;
$$;
DROP TRIGGER IF EXISTS outbox_events_to_wal ON {schema}.outbox_events;
CREATE TRIGGER outbox_events_to_wal
    BEFORE INSERT ON {schema}.outbox_events
    FOR EACH ROW EXECUTE FUNCTION {schema}.outbox_events_to_wal();
