-- Paused delivery: while a row is here, relays claim nothing of what it
-- names. `aggregate_type` NULL pauses the whole outbox; otherwise only that
-- aggregate type. Events stay pending in their order and are delivered,
-- in seq order, once the row is deleted (resume). Written by
-- `outbox console`; read by every claim, so every relay honours a pause at
-- its next claim (within its poll interval).
CREATE TABLE IF NOT EXISTS {schema}.outbox_pauses (
    aggregate_type VARCHAR(100),
    paused_at      TIMESTAMPTZ NOT NULL DEFAULT now(),
    paused_by      TEXT        NOT NULL DEFAULT ''
);
-- One row per scope; the whole outbox (NULL) is its own scope, distinct
-- from an aggregate type named ''.
CREATE UNIQUE INDEX IF NOT EXISTS outbox_pauses_scope
    ON {schema}.outbox_pauses ((aggregate_type IS NULL), (coalesce(aggregate_type, '')));
