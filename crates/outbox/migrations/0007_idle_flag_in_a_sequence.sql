-- The idle announcement moves from a table row to a sequence's value, and
-- the triggers' tests into their WHEN conditions.
--
-- A relay flips between busy and idle up to hundreds of times a second, and
-- every flip updated its row in outbox_relay_idle. While something held
-- PostgreSQL's xmin back (a report, pg_dump, an idle-in-transaction
-- session), none of those row versions could be removed: measured at 2,000
-- events/s, after 110 s of a held snapshot the announcement took 2.9 ms and
-- read 13,400 buffers, its withdrawal 0.75 ms, and every producer's EXISTS
-- 214 µs instead of 17 µs (docs/performance.md). A sequence is updated in
-- place, outside MVCC: `setval` leaves nothing behind, and its new value is
-- visible to every session at once, whatever their snapshots.
--
-- outbox_relay_idle_until holds the time until which some relay sleeps, in
-- milliseconds since 1970 (0, or never set: none does). Relays refresh it
-- while they sleep, so a relay that died stops costing producers once it
-- lapses. Every role may read it: the trigger runs with the producer's
-- rights, and the value says nothing but a time.
--
-- The idle trigger's WHEN takes the transaction id first (migration 4's
-- invariant, which the claim cursor depends on), then reads the sequence;
-- the trigger's function, which only sends the NOTIFY, runs only while a
-- relay sleeps. In the other modes outbox_xid_first's WHEN takes the id and
-- is false, so its function never runs either: no PL/pgSQL call per
-- statement in any mode. Those triggers are the modes' own (`migrate.rs`):
-- `migrate` installs the schema's mode again, in this form, right after
-- applying this migration.
CREATE SEQUENCE IF NOT EXISTS {schema}.outbox_relay_idle_until MINVALUE 0 START 0;
GRANT SELECT ON SEQUENCE {schema}.outbox_relay_idle_until TO PUBLIC;

CREATE OR REPLACE FUNCTION {schema}.outbox_wake_idle_relay() RETURNS trigger AS $$
BEGIN
    PERFORM pg_notify('{channel}', '');
    RETURN NULL;
END;
$$ LANGUAGE plpgsql;

DROP TABLE IF EXISTS {schema}.outbox_relay_idle;
