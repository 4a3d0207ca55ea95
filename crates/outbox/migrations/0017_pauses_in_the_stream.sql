-- A pause added or lifted is also written into the WAL, as a transactional
-- logical message with the schema's prefix and the content `pauses`. The
-- WAL reader reads it in commit order, so an event that commits after a
-- pause is never published before the reader has read the pause again
-- (the NOTIFY alone may reach the relay after the event). In the table
-- mode nothing reads it. SECURITY DEFINER: a role that may pause need not
-- be allowed `pg_logical_emit_message` (docs/operations.md, "Who may
-- publish in the WAL mode").
CREATE OR REPLACE FUNCTION {schema}.outbox_pauses_changed() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    PERFORM pg_notify('{channel}', 'pauses');
    PERFORM pg_logical_emit_message(true, '{prefix}', 'pauses');
    RETURN NULL;
END;
$$;
