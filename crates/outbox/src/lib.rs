//! A transactional outbox for PostgreSQL.
//!
//! Write events in the same transaction as your data with
//! [`Outbox::enqueue`]; a [`Relay`] publishes committed events to a broker,
//! at least once and in order per aggregate; an [`Inbox`] on the consumer
//! side turns redeliveries into no-ops. See the README for a tour.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod discover;
mod error;
mod event;
mod inbox;
mod maintenance;
mod migrate;
mod outbox;
mod publisher;
mod queries;
pub mod redact;
mod relay;
mod schema;
mod status;
#[cfg(feature = "opentelemetry")]
mod trace;
mod wakeup;
mod wal;

pub use error::{Error, Result};
pub use event::{
    Event, NewEvent, IDENTITY_HEADER_NAMES, MAX_HEADER_NAME_CHARS, MAX_NAME_CHARS, MAX_TOPIC_CHARS,
};
pub use inbox::{Inbox, MAX_CONSUMER_CHARS};
pub use maintenance::{
    format_age, parse_age, Cleaner, CleanerConfig, CleanerHandle, CleanerStats, Cleanup,
    CleanupParams, CleanupTarget, DeadLetter, DeadLetterFilter, DeadLetterPage, DeadLetters,
    Selector, DEFAULT_CLEANUP_BATCH_SIZE, DEFAULT_LIST_LIMIT, MAX_CLEANUP_BATCH_SIZE,
    MAX_LIST_LIMIT,
};
pub use migrate::{
    ensure_migrated, migrate, MigrateOptions, MigrationReport, WakeupTrigger, DEFAULT_PARTITIONS,
    MAX_PARTITIONS,
};
pub use outbox::Outbox;
pub use publisher::{Outcome, Publisher, Unavailable};
pub use relay::sources;
pub use relay::wal::{ReplicationTarget, SlotState};
pub use relay::{
    BatchReport, OutageKind, Relay, RelayBuilder, RelayConfig, RelayHandle, RelayObserver,
    RelayStats, Retention, StatsSnapshot,
};
pub use schema::Schema;
pub use status::{PartitionOwner, SlotStatus, Status};
pub use wakeup::Wakeup;
pub use wal::switch_back::DEFAULT_SWITCH_TIMEOUT;
pub use wal::{default_slot_name, DeliveryMode};

/// Not part of the API: what the crate's own integration tests reach of
/// its insides, behind the feature `test-seam` that only they turn on.
#[cfg(feature = "test-seam")]
#[doc(hidden)]
pub use relay::test_seam;
