//! Where the relay has confirmed the slot, saved beside it in
//! `outbox_wal`. PostgreSQL before 17 keeps a slot's confirmed position in
//! memory until something else about the slot changes, so a restart of the
//! server can take the slot back by many seconds of events. A session
//! starts from the saved position instead (START_REPLICATION skips every
//! transaction that committed before it), which bounds what a restart reads
//! again: at most [`SAVE_AFTER_EVENTS`] events or a tenth of a second of
//! them, whichever is more, and never more than a second of them.

use std::time::{Duration, Instant};

use pgwire_replication::Lsn;
use sqlx::PgPool;

use crate::error::{Error, Result};
use crate::queries as q;
use crate::schema::Schema;

/// A moving position is saved at most this often...
const SAVE_EVERY: Duration = Duration::from_millis(100);
/// ...once this many events were confirmed since the last save...
const SAVE_AFTER_EVENTS: u64 = 500;
/// ...and at least this often. Each save is a committed UPDATE (its WAL
/// flush, and the walsender decoding it): ten a second cost about 9 µs of
/// CPU per event at 500 events a second, so fewer events wait longer.
const SAVE_AT_LEAST_EVERY: Duration = Duration::from_secs(1);

/// The saved position of one schema's slot.
#[derive(Debug)]
pub(crate) struct Position {
    pool: PgPool,
    save: String,
    load: String,
    saved_at: Option<Instant>,
    /// Events confirmed since the last save.
    unsaved: u64,
}

impl Position {
    pub(crate) fn new(pool: PgPool, schema: &Schema) -> Self {
        Position {
            pool,
            save: schema.render(q::WAL_CONFIRMED_SAVE),
            load: schema.render(q::WAL_CONFIRMED_SAVED),
            saved_at: None,
            unsaved: 0,
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

    /// Counts `events` published, to be confirmed.
    pub(crate) fn published(&mut self, events: u64) {
        self.unsaved += events;
    }

    /// Notes that the slot is confirmed to `lsn`, and saves it when
    /// [`save_due`] says so; off the publishing path (its own task), and a
    /// failed save is only logged: the server's own confirmed position
    /// still holds.
    pub(crate) fn confirmed(&mut self, lsn: Lsn) {
        if !save_due(self.saved_at.map(|at| at.elapsed()), self.unsaved) {
            return;
        }
        self.unsaved = 0;
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

/// Whether a position is saved now: `since` the last save (`None`: never
/// saved), with `unsaved` events confirmed since.
fn save_due(since: Option<Duration>, unsaved: u64) -> bool {
    match since {
        None => true,
        Some(since) => {
            since >= SAVE_AT_LEAST_EVERY || (since >= SAVE_EVERY && unsaved >= SAVE_AFTER_EVENTS)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_position_is_saved_by_events_at_most_ten_times_a_second_and_by_time_at_least_once_a_second()
    {
        let ms = Duration::from_millis;
        assert!(save_due(None, 0), "the first confirmation is saved");
        assert!(!save_due(Some(ms(99)), 10_000), "never within 100 ms");
        assert!(save_due(Some(ms(100)), SAVE_AFTER_EVENTS));
        assert!(!save_due(Some(ms(100)), SAVE_AFTER_EVENTS - 1));
        assert!(!save_due(Some(ms(999)), 3), "few events wait...");
        assert!(save_due(Some(ms(1_000)), 1), "...a second at most");
    }
}
