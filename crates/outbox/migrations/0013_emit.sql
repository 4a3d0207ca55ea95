-- `outbox_emit(...)`: one function every producer can call, in any
-- language, inside its own transaction, whatever the schema's delivery
-- mode. In the table mode (migrations/wal_mode_off.sql, installed right
-- after this migration) it inserts the event's row, so the table's checks
-- refuse what they always refused; in the WAL mode (`outbox migrate --mode
-- wal`, migrations/wal_mode_on.sql) the same signature validates the same
-- rules itself and writes a transactional logical message instead of a
-- row.
--
-- The event id is time-ordered (UUID version 7: 48 bits of milliseconds,
-- then random bits) unless the caller passes one, and is returned.
CREATE OR REPLACE FUNCTION {schema}.outbox_uuid7() RETURNS uuid
    LANGUAGE sql VOLATILE PARALLEL SAFE
    -- A random (version 4) uuid, its first 6 bytes replaced by the Unix
    -- time in milliseconds, its version nibble turned from 4 into 7.
    RETURN encode(set_bit(set_bit(overlay(uuid_send(gen_random_uuid())
               placing substring(int8send((date_part('epoch', clock_timestamp()) * 1000)::int8) from 3)
               from 1 for 6), 52, 1), 53, 1), 'hex')::uuid;

-- The replication slot and publication a WAL-mode schema is read through:
-- written by `outbox migrate --mode wal`, read by the relay. At most one row.
-- After a switch back to the table (`outbox migrate --mode table`), until
-- the relay has read the slot to the switch: the range of seq values kept
-- for the events the relay sets aside meanwhile (`switch_seq_next` up to
-- `switch_seq_end`), below every row written after the switch, so none of
-- those overtakes an earlier event of its aggregate. `confirmed_lsn`: where
-- the relay last confirmed the slot, saved ten times a second; a session
-- starts there, since PostgreSQL before 17 does not save a slot's confirmed
-- position at shutdown and would send every event since its last save again.
CREATE TABLE IF NOT EXISTS {schema}.outbox_wal (
    one             BOOLEAN     PRIMARY KEY DEFAULT true CHECK (one),
    slot_name       TEXT        NOT NULL,
    publication     TEXT        NOT NULL,
    created_at      TIMESTAMPTZ NOT NULL DEFAULT now(),
    switch_seq_next BIGINT,
    switch_seq_end  BIGINT,
    confirmed_lsn   PG_LSN
);
