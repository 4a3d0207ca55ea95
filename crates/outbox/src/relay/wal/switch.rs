//! The switch back to the table mode, as the reader ends it. `outbox
//! migrate --mode table` pauses the table's rows and writes a mark into the
//! stream in the transaction that switches; events emitted before it are
//! in the slot, rows written after it wait. The reader publishes up to the
//! mark, then lifts the pause, forgets the slot and drops it, so the
//! table's rows follow every earlier event of their aggregate.

use std::time::Duration;

use sqlx::PgPool;

use crate::error::{Error, Result};
use crate::queries as q;
use crate::schema::Schema;

/// The mark's content (no event message is this text: an event's starts
/// with its id).
pub(crate) const SWITCH_TO_TABLE: &str = "switch table";

/// Ends the switch for one schema.
#[derive(Debug, Clone)]
pub(crate) struct Switch {
    pool: PgPool,
    done: String,
}

impl Switch {
    pub(crate) fn new(pool: PgPool, schema: &Schema) -> Self {
        Switch {
            pool,
            done: schema.render(q::WAL_SWITCH_DONE),
        }
    }

    /// Lifts the switch's pause and forgets the slot, then drops it (once
    /// the server has let the session go).
    pub(crate) async fn finish(&self, slot: &str) -> Result<()> {
        sqlx::query(&self.done)
            .execute(&self.pool)
            .await
            .map_err(Error::db("ending the switch to the table mode"))?;
        for _ in 0..50 {
            sqlx::query(q::WAL_SLOT_DROP)
                .bind(slot)
                .execute(&self.pool)
                .await
                .map_err(Error::db("dropping the replication slot"))?;
            let left: bool = sqlx::query_scalar(q::WAL_SLOT_EXISTS)
                .bind(slot)
                .fetch_one(&self.pool)
                .await
                .map_err(Error::db("looking for the replication slot"))?;
            if !left {
                sqlx::raw_sql(&format!("DROP PUBLICATION IF EXISTS \"{slot}\""))
                    .execute(&self.pool)
                    .await
                    .map_err(Error::db("dropping the slot's publication"))?;
                tracing::info!(
                    slot,
                    "switched to the table mode: the slot is read to the switch and dropped"
                );
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        tracing::warn!(slot, "switched to the table mode, but the slot is still in use: drop it with SELECT pg_drop_replication_slot('{slot}') once nothing reads it");
        Ok(())
    }
}
