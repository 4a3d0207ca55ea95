//! The switch back to the table mode, as the reader ends it
//! (crate::wal::switch_back has the whole sequence). The reader learns the
//! switch's mark position when a session starts and when a mark arrives;
//! once it has confirmed the slot to that position, every event emitted
//! through the WAL mode is delivered or set aside, and it ends the switch:
//! the pause is lifted, the slot forgotten and dropped. A mark at any other
//! position (a forged one, or an old one read again) is not obeyed.

use std::time::Duration;

use pgwire_replication::Lsn;
use sqlx::PgPool;

use crate::error::{Error, Result};
use crate::queries as q;
use crate::schema::Schema;
use crate::wal::switch_back::{self, SlotHealth};

pub(crate) use crate::wal::switch_back::SWITCH_TO_TABLE;

/// Where the pending switch's mark is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mark {
    /// No switch waits for the reader.
    None,
    /// The reader ends the switch once it has confirmed the slot here.
    At(Lsn),
    /// The slot is already confirmed past it: end the switch now.
    Reached,
}

/// What a slot that cannot be read means for the schema.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Gone {
    /// The schema has no slot any more (a switch back to the table mode
    /// ended, by another relay or by `migrate`): nothing to read.
    Forgotten,
    /// A switch was waiting for the slot: it is ended now, without it.
    SwitchEnded,
    /// The schema is in the WAL mode and its slot is gone: the relay
    /// cannot go on. The text names what happened and the fix.
    Fatal(String),
}

/// Ends the switch for one schema.
#[derive(Debug, Clone)]
pub(crate) struct Switch {
    pool: PgPool,
    schema: Schema,
    reached: String,
}

impl Switch {
    pub(crate) fn new(pool: PgPool, schema: &Schema) -> Self {
        Switch {
            pool,
            schema: schema.clone(),
            reached: schema.render(q::WAL_SWITCH_MARK_REACHED),
        }
    }

    /// The pending switch's mark, as the database has it now.
    pub(crate) async fn mark(&self) -> Result<Mark> {
        let row: Option<(String, bool)> = sqlx::query_as(&self.reached)
            .fetch_optional(&self.pool)
            .await
            .map_err(Error::db("reading the switch's mark"))?;
        Ok(match row {
            None => Mark::None,
            Some((_, true)) => Mark::Reached,
            Some((lsn, false)) => match Lsn::parse(&lsn) {
                Ok(lsn) => Mark::At(lsn),
                Err(_) => Mark::None,
            },
        })
    }

    /// Lifts the switch's pause and forgets the slot, then drops it (once
    /// the server has let the session go).
    pub(crate) async fn finish(&self, slot: &str) -> Result<()> {
        let mut conn = self
            .pool
            .acquire()
            .await
            .map_err(Error::db("ending the switch to the table mode"))?;
        let mut dropped = switch_back::end(&mut conn, &self.schema, slot).await?;
        for _ in 0..50 {
            if dropped {
                tracing::info!(
                    slot,
                    "switched to the table mode: the slot is read to the switch and dropped"
                );
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
            dropped = switch_back::drop_slot(&mut conn, slot).await?;
        }
        tracing::warn!(slot, "switched to the table mode, but the slot is still in use: drop it with SELECT pg_drop_replication_slot('{slot}') once nothing reads it");
        Ok(())
    }

    /// What to do about slot `slot`, which the server says is `health`
    /// (not readable).
    pub(crate) async fn slot_gone(&self, slot: &str, health: SlotHealth) -> Result<Gone> {
        let mut conn = self
            .pool
            .acquire()
            .await
            .map_err(Error::db("reading the schema's replication slot"))?;
        let recorded = crate::wal::recorded_slot(&self.pool, &self.schema).await?;
        if recorded.as_ref().is_none_or(|(r, _)| r != slot) {
            return Ok(Gone::Forgotten);
        }
        if switch_back::state(&mut conn, &self.schema).await?.is_some() {
            switch_back::end(&mut conn, &self.schema, slot).await?;
            tracing::error!(
                slot,
                "{}: the switch to the table mode is ended without it; events emitted into it after its last confirmed position could not be delivered",
                health.describe(slot)
            );
            return Ok(Gone::SwitchEnded);
        }
        Ok(Gone::Fatal(format!(
            "{}, so the events emitted since its last confirmed position cannot be read: run outbox migrate --mode wal to create it again and go on reading from now (or outbox migrate --mode table to deliver from the table from now on)",
            health.describe(slot)
        )))
    }
}
