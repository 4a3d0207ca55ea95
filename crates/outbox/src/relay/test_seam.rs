//! Not part of the API: the relay's store as its own integration tests
//! (`crates/outbox/tests/relay_store_*.rs`) drive it, without a relay
//! around it. Nothing here is stable; nothing outside those tests uses it.

use std::time::Duration;

use sqlx::PgPool;

pub use super::store::Held;
use super::store::{RowRefs, Store};
use crate::error::Result;
use crate::relay::cursor::Start;
use crate::schema::Schema;
/// The WAL mode's message decoder, for the tests that read messages back
/// from a slot of their own.
pub use crate::wal::message::{decode as wal_message_decode, Emitted};

/// Claims of every partition of a schema, from the table's first row, each
/// acknowledging the batch the one before returned, as a busy relay's
/// claims do.
#[derive(Debug)]
pub struct ClaimLoop {
    store: Store,
    partitions: Vec<i32>,
    acked: RowRefs,
}

impl ClaimLoop {
    /// A claim loop over every partition of `schema`, on `pool`.
    pub async fn new(pool: PgPool, schema: &Schema) -> Result<Self> {
        let store = Store::new(pool, schema, false);
        let partitions = (0..store.partition_count().await?).collect();
        Ok(ClaimLoop {
            store,
            partitions,
            acked: RowRefs::default(),
        })
    }

    /// Acknowledges the last batch and claims up to `limit` events in the
    /// same statement; returns how many it claimed.
    pub async fn claim(&mut self, limit: usize) -> Result<usize> {
        let start = Start {
            from: 0,
            waiting_for: i64::MIN,
        };
        let batch = self
            .store
            .event_ack_and_claim(&self.partitions, limit, &self.acked, &self.acked.ids, start)
            .await?;
        self.acked = RowRefs {
            ids: batch.events.iter().map(|e| e.id).collect(),
            ctids: batch
                .events
                .iter()
                .map(|e| batch.ctids[&e.id].clone())
                .collect(),
        };
        Ok(self.acked.ids.len())
    }

    /// The time until the earliest backoff of the partitions ends, as an
    /// idle relay reads it.
    pub async fn next_retry(&self) -> Result<Option<Duration>> {
        self.store.event_next_retry(&self.partitions).await
    }
}
