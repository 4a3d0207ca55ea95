-- The relay's claim cursor (see relay/cursor.rs) may pass a seq only once
-- every transaction that could still commit a row with that seq has ended.
-- It can tell that from snapshots only if a row's transaction has its
-- transaction id before the row draws its seq: column defaults (the seq)
-- are evaluated before a row's INSERT assigns the id, so a statement-level
-- trigger, which runs before any row is formed, assigns it first. Costs one
-- call per INSERT statement, not per row; COPY fires it too.
CREATE OR REPLACE FUNCTION {schema}.outbox_xid_first() RETURNS trigger AS $$
BEGIN
    PERFORM pg_current_xact_id();
    RETURN NULL;
END;
$$ LANGUAGE plpgsql;

DROP TRIGGER IF EXISTS outbox_xid_first ON {schema}.outbox_events;
CREATE TRIGGER outbox_xid_first
BEFORE INSERT ON {schema}.outbox_events
FOR EACH STATEMENT EXECUTE FUNCTION {schema}.outbox_xid_first();
