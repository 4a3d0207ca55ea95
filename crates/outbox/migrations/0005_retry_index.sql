-- Rows waiting out a backoff, indexed by when they are due, with a
-- predicate on `next_attempt_at` alone (it is NULL on every processed or
-- dead-lettered row: acknowledging and dead-lettering clear it).
--
-- The claim's retry lookups test "pending" as
-- `coalesce(processed_at, dead_lettered_at) IS NULL`, which the planner
-- cannot match to the unprocessed-rows index's predicate, so this index is
-- the only one they can use. Before, statistics gathered while most rows
-- were processed (retention mode) or deleted-but-unvacuumable (a held
-- snapshot) made the planner walk the whole unprocessed-rows index for
-- them instead, dead entries included, at every claim.
DROP INDEX IF EXISTS {schema}.idx_outbox_retrying;
CREATE INDEX IF NOT EXISTS idx_outbox_retrying
    ON {schema}.outbox_events (next_attempt_at)
    WHERE next_attempt_at IS NOT NULL;
