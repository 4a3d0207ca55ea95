//! Every statement the library runs is a named constant in a queries
//! module, one per area; `{schema}` is replaced by the configured schema.
//!
//! | area | module |
//! |------|--------|
//! | the relay: claim, acknowledgement, retries, idle announcement, leases | [`relay`] |
//! | the status report | [`status`] |
//! | schema discovery for `schemas = "PATTERN"` sources | [`discover`] |
//! | producers: enqueue, the wake-up after commit | [`producer`] |
//! | the consumer inbox | [`inbox`] |
//! | the relay of many sources: the dormant schemas' check and announcements | [`sources`] |
//! | the migration runner (the migrations are `crates/outbox/migrations/*.sql`) | [`migrate`] |
//! | the WAL delivery mode: its server checks, slot, and producer calls | [`wal`] |
//! | the maintenance tools: dead letters, cleanup | `crate::maintenance::queries` |
//!
//! Callers name them as `queries::NAME` (`use crate::queries as q`); the
//! areas are for readers, and the names are unique across them.

mod discover;
mod inbox;
mod migrate;
mod producer;
mod relay;
mod sources;
mod status;
mod wal;

pub use discover::*;
pub use inbox::*;
pub use migrate::*;
pub use producer::*;
pub use relay::*;
pub use sources::*;
pub use status::*;
pub use wal::*;
