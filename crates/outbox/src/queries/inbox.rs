//! The consumer inbox's statement.

/// Marks event `$2` processed by consumer `$1`; changes no row when it
/// already was (the duplicate is to be skipped).
pub const INBOX_PROCESSED_INSERT: &str = "
INSERT INTO {schema}.processed_events (consumer, event_id) VALUES ($1, $2)
ON CONFLICT (consumer, event_id) DO NOTHING";
