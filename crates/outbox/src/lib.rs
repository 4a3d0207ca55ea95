//! A transactional outbox for PostgreSQL.
//!
//! Write events in the same transaction as your data with
//! [`Outbox::enqueue`]; a [`Relay`] publishes committed events to a broker,
//! at least once and in order per aggregate; an [`Inbox`] on the consumer
//! side turns redeliveries into no-ops. See the README for a tour.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod error;
mod event;
mod inbox;
mod maintenance;
mod migrate;
mod outbox;
mod publisher;
pub mod queries;
pub mod relay;
mod schema;
mod status;
mod wakeup;

pub use error::{Error, Result};
pub use event::{Event, NewEvent, MAX_HEADER_NAME_CHARS, MAX_NAME_CHARS, MAX_TOPIC_CHARS};
pub use inbox::{Inbox, MAX_CONSUMER_CHARS};
pub use maintenance::{
    cleanup_inbox, cleanup_processed, format_age, Cleaner, CleanerConfig, CleanerHandle,
    CleanerStats, Cleanup, CleanupParams, CleanupTarget, DeadLetter, DeadLetterFilter,
    DeadLetterPage, DeadLetters, Selector, DEFAULT_CLEANUP_BATCH_SIZE, DEFAULT_LIST_LIMIT,
    MAX_CLEANUP_BATCH_SIZE, MAX_LIST_LIMIT,
};
pub use migrate::{
    ensure_migrated, migrate, MigrateOptions, MigrationReport, DEFAULT_PARTITIONS, MAX_PARTITIONS,
};
pub use outbox::Outbox;
pub use publisher::{Outcome, Publisher, Unavailable};
pub use relay::{Relay, RelayBuilder, RelayConfig, RelayHandle, Retention};
pub use schema::Schema;
pub use status::{PartitionOwner, Status};
pub use wakeup::Wakeup;
