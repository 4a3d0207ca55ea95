-- The dead letters in seq order, for the console's dead-letter pages, its
-- stuck aggregates and its counts, and for `outbox dead-letters`: without
-- it every one of those reads the whole table (measured on 1,000,000
-- processed rows kept, 100,000 pending and 100,000 dead letters: 140 ms
-- for a count, 200-360 ms a page; with it, a few ms).
--
-- What producers pay: the predicate is false for every row they insert
-- (`dead_lettered_at` is NULL), so no entry is written; PostgreSQL still
-- opens the index and evaluates its predicate at each INSERT statement.
-- Measured with callgrind (docs/performance.md, the order transaction):
-- 325-326k instructions per transaction against 318k without it (+2.4 %). Dead-lettering a
-- row writes one entry; retrying or discarding it leaves one dead entry
-- for vacuum.
--
-- Lock: SHARE on outbox_events while the index is built (writers wait;
-- 0.5 s for 1,200,000 rows here). On a large live table, create
-- it first with CREATE INDEX CONCURRENTLY under this name; this
-- migration then finds it and changes nothing.
CREATE INDEX IF NOT EXISTS idx_outbox_dead_letters
    ON {schema}.outbox_events (seq)
    WHERE dead_lettered_at IS NOT NULL AND processed_at IS NULL;
