//! The statements of the maintenance tools (dead letters and cleanup), in one
//! place (the rest are in `crate::queries`). `{schema}` is replaced by the
//! configured schema.
//!
//! The dead-letter statements share one predicate whose parameters are all
//! optional (NULL matches everything):
//!
//! | param | type       | meaning                                           |
//! |-------|------------|---------------------------------------------------|
//! | `$1`  | `uuid[]`   | one of these ids                                  |
//! | `$2`  | `text`     | this aggregate type                               |
//! | `$3`  | `text`     | this aggregate id                                 |
//! | `$4`  | `text`     | this event type                                   |
//! | `$5`  | `bigint`   | dead-lettered at least this many ms ago           |
//! | `$6`  | `bigint`   | dead-lettered less than this many ms ago          |

/// A dead letter (as in the `outbox_dead_letters` view) matching `$1`–`$6`:
/// the one predicate every dead-letter statement here runs, so a list shows
/// exactly what a retry or discard with the same criteria touches.
macro_rules! dead_letter_match {
    () => {
        "dead_lettered_at IS NOT NULL AND processed_at IS NULL
  AND ($1::uuid[] IS NULL OR id = ANY($1::uuid[]))
  AND ($2::text IS NULL OR aggregate_type = $2::text)
  AND ($3::text IS NULL OR aggregate_id = $3::text)
  AND ($4::text IS NULL OR event_type = $4::text)
  AND ($5::bigint IS NULL OR dead_lettered_at <= now() - $5::bigint * interval '1 millisecond')
  AND ($6::bigint IS NULL OR dead_lettered_at > now() - $6::bigint * interval '1 millisecond')"
    };
}

/// Matching dead letters in seq order, at most `$7`, each with the number of
/// matches before the limit.
pub const DEAD_LETTER_LIST: &str = concat!(
    "
SELECT id, seq, aggregate_type, aggregate_id, event_type, payload::text, headers::text, topic,
       attempts,
       CASE WHEN isfinite(created_at) AND created_at < '100000-01-01' THEN created_at END,
       CASE WHEN isfinite(dead_lettered_at) AND dead_lettered_at < '100000-01-01'
            THEN dead_lettered_at END,
       last_error, count(*) OVER () AS total
FROM {schema}.outbox_events
WHERE ",
    dead_letter_match!(),
    "
ORDER BY seq
LIMIT $7"
);

/// The ids of the dead letters matching `$1`–`$6` whose last error
/// contains `$9` (case-insensitively; `strpos`, so `%` and `_` are plain
/// characters; NULL matches every one), in seq order: one keyset page,
/// seq above `$7`, at most `$8`. For a list that shows columns of its own.
pub const DEAD_LETTER_PAGE_IDS: &str = concat!(
    "
SELECT id FROM {schema}.outbox_events
WHERE ",
    dead_letter_match!(),
    "
  AND ($9::text IS NULL OR strpos(lower(coalesce(last_error, '')), lower($9::text)) > 0)
  AND seq > $7
ORDER BY seq
LIMIT $8"
);

/// How many dead letters match.
pub const DEAD_LETTER_COUNT: &str = concat!(
    "
SELECT count(*) FROM {schema}.outbox_events
WHERE ",
    dead_letter_match!()
);

/// Puts matching dead letters back in the queue. They keep their seq, so the
/// relay takes them in their original order; attempts start again from zero;
/// `last_error` is kept for diagnosis until the next attempt overwrites it.
/// They come back as retries due now (`next_attempt_at = now()`), not as
/// fresh rows: they lie below the relays' claim cursors, and the claim reads
/// due retries from anywhere.
pub const DEAD_LETTER_RETRY: &str = concat!(
    "
UPDATE {schema}.outbox_events
SET dead_lettered_at = NULL, attempts = 0, next_attempt_at = now()
WHERE ",
    dead_letter_match!()
);

/// Deletes matching dead letters.
pub const DEAD_LETTER_DISCARD: &str = concat!(
    "
DELETE FROM {schema}.outbox_events
WHERE ",
    dead_letter_match!()
);

/// The cut-off of a cleanup run: now minus `$1` milliseconds, on the
/// database's clock.
pub const CLEANUP_CUTOFF: &str = "
SELECT now() - $1::bigint * interval '1 millisecond'";

/// Deletes at most `$2` events processed before `$1` (retention mode), in
/// one short statement; rows locked by a concurrent cleaner are skipped.
/// Walks the partial index on `processed_at`.
pub const EVENT_DELETE_PROCESSED_BATCH: &str = "
DELETE FROM {schema}.outbox_events
WHERE id IN (SELECT id FROM {schema}.outbox_events
             WHERE processed_at < $1
             LIMIT $2
             FOR UPDATE SKIP LOCKED)";

/// Events processed before `$1` (a cleanup's dry run).
pub const EVENT_COUNT_PROCESSED: &str = "
SELECT count(*) FROM {schema}.outbox_events WHERE processed_at < $1";

/// Deletes at most `$2` inbox marks older than `$1`, like
/// [`EVENT_DELETE_PROCESSED_BATCH`].
pub const INBOX_DELETE_BATCH: &str = "
DELETE FROM {schema}.processed_events
WHERE (consumer, event_id) IN (SELECT consumer, event_id FROM {schema}.processed_events
                               WHERE processed_at < $1
                               LIMIT $2
                               FOR UPDATE SKIP LOCKED)";

/// Inbox marks older than `$1` (a cleanup's dry run).
pub const INBOX_COUNT: &str = "
SELECT count(*) FROM {schema}.processed_events WHERE processed_at < $1";
