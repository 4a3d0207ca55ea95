//! Operator tools: dead letters (list, retry, discard) and the retention
//! cleanup of processed events and inbox marks. See `docs/dead-letters.md`.

mod age;
mod cleaner;
mod cleanup;
mod dead_letters;
mod queries;
mod selector;

pub use age::{format_age, parse_age};
pub use cleaner::{Cleaner, CleanerConfig, CleanerHandle, CleanerStats};
pub use cleanup::{
    Cleanup, CleanupParams, CleanupTarget, DEFAULT_CLEANUP_BATCH_SIZE, MAX_CLEANUP_BATCH_SIZE,
};
pub use dead_letters::{DeadLetter, DeadLetterPage, DeadLetters};
pub use selector::{DeadLetterFilter, Selector, DEFAULT_LIST_LIMIT, MAX_LIST_LIMIT};
