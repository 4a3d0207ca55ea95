//! Operator tools: dead letters (list, retry, discard) and the retention
//! cleanup of processed events and inbox marks. See `docs/dead-letters.md`.

mod cleaner;
mod cleanup;
mod dead_letters;
mod queries;
mod selector;

pub use cleaner::{Cleaner, CleanerConfig, CleanerHandle, CleanerStats};
pub use cleanup::{
    Cleanup, CleanupParams, CleanupTarget, DEFAULT_CLEANUP_BATCH_SIZE, MAX_CLEANUP_BATCH_SIZE,
};
pub use dead_letters::{DeadLetter, DeadLetterPage, DeadLetters};
pub use selector::{format_age, DeadLetterFilter, Selector, DEFAULT_LIST_LIMIT, MAX_LIST_LIMIT};
