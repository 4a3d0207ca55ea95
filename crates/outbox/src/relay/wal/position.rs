//! Where the relay has confirmed the slot, saved beside it in
//! `outbox_wal`. PostgreSQL before 17 keeps a slot's confirmed position in
//! memory until something else about the slot changes, so a restart of the
//! server can take the slot back by many seconds of events. A session
//! starts from the saved position instead (START_REPLICATION skips every
//! transaction that committed before it), which bounds what a restart reads
//! again to about a tenth of a second of events.

use std::time::{Duration, Instant};

use pgwire_replication::Lsn;
use sqlx::PgPool;

use crate::error::{Error, Result};
use crate::queries as q;
use crate::schema::Schema;

/// How often a moving position is saved.
const SAVE_EVERY: Duration = Duration::from_millis(100);

/// The saved position of one schema's slot.
#[derive(Debug)]
pub(crate) struct Position {
    pool: PgPool,
    save: String,
    load: String,
    saved_at: Option<Instant>,
}

impl Position {
    pub(crate) fn new(pool: PgPool, schema: &Schema) -> Self {
        Position {
            pool,
            save: schema.render(q::WAL_CONFIRMED_SAVE),
            load: schema.render(q::WAL_CONFIRMED_SAVED),
            saved_at: None,
        }
    }

    /// The last saved position, if any.
    pub(crate) async fn saved(&self) -> Result<Option<Lsn>> {
        let text: Option<Option<String>> = sqlx::query_scalar(&self.load)
            .fetch_optional(&self.pool)
            .await
            .map_err(Error::db("reading the slot's saved position"))?;
        Ok(text.flatten().and_then(|t| Lsn::parse(&t).ok()))
    }

    /// Saves `lsn` unless a save happened within the last second; off the
    /// publishing path (its own task), and a failed save is only logged:
    /// the server's own confirmed position still holds.
    pub(crate) fn confirmed(&mut self, lsn: Lsn) {
        if self.saved_at.is_some_and(|at| at.elapsed() < SAVE_EVERY) {
            return;
        }
        self.saved_at = Some(Instant::now());
        let pool = self.pool.clone();
        let sql = self.save.clone();
        tokio::spawn(async move {
            if let Err(e) = sqlx::query(&sql)
                .bind(lsn.to_pg_string())
                .execute(&pool)
                .await
            {
                tracing::debug!(error = %e, "could not save the slot's confirmed position");
            }
        });
    }
}
