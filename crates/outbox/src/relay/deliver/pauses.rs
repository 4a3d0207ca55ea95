//! The pauses (`outbox_pauses`: one aggregate type, or the whole outbox),
//! as a source that does not claim rows reads them. The table's claim
//! skips paused rows itself; the WAL reader has no claim, so it asks here
//! which events of the stream are held, and sets those aside in the table,
//! where the pause applies to them as to every row until it is lifted.
//!
//! Read again when a pause changes (a trigger on the table NOTIFYs the
//! schema's channel, and the relay's listener passes it on through
//! [`Wakeup::pauses_changed`]), and at least every [`REREAD`], in case a
//! notification was lost while the listener reconnected.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use sqlx::PgPool;

use crate::error::{Error, Result};
use crate::event::Event;
use crate::queries as q;
use crate::schema::Schema;
use crate::wakeup::Wakeup;

/// The longest a change of the pauses can go unread.
const REREAD: Duration = Duration::from_secs(1);

/// What is paused now.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Pauses {
    /// The whole outbox.
    pub all: bool,
    /// These aggregate types.
    pub types: HashSet<String>,
}

impl Pauses {
    /// Whether `event` is held by a pause.
    pub(crate) fn hold(&self, event: &Event) -> bool {
        self.all || self.types.contains(&event.aggregate_type)
    }

    /// Whether nothing is paused.
    pub(crate) fn is_empty(&self) -> bool {
        !self.all && self.types.is_empty()
    }

    fn from_rows(rows: Vec<Option<String>>) -> Self {
        let mut p = Pauses::default();
        for row in rows {
            match row {
                None => p.all = true,
                Some(t) => {
                    p.types.insert(t);
                }
            }
        }
        p
    }
}

/// The pauses of one schema, read when they change.
#[derive(Debug)]
pub(crate) struct PauseWatch {
    pool: PgPool,
    sql: String,
    wakeup: Arc<Wakeup>,
    /// The pause changes already read, and when.
    read: Option<(u64, Instant)>,
    current: Pauses,
}

impl PauseWatch {
    pub(crate) fn new(pool: PgPool, schema: &Schema, wakeup: Arc<Wakeup>) -> Self {
        PauseWatch {
            pool,
            sql: schema.render(q::PAUSES_HELD),
            wakeup,
            read: None,
            current: Pauses::default(),
        }
    }

    /// What is paused now: read again if a pause changed since the last
    /// read, or it is older than [`REREAD`].
    pub(crate) async fn current(&mut self) -> Result<&Pauses> {
        let generation = self.wakeup.pauses_generation();
        let fresh = self
            .read
            .is_some_and(|(seen, at)| seen == generation && at.elapsed() < REREAD);
        if !fresh {
            let rows: Vec<Option<String>> = sqlx::query_scalar(&self.sql)
                .fetch_all(&self.pool)
                .await
                .map_err(Error::db("reading the pauses"))?;
            self.current = Pauses::from_rows(rows);
            self.read = Some((generation, Instant::now()));
        }
        Ok(&self.current)
    }

    /// Forgets what was read: the next [`PauseWatch::current`] reads.
    pub(crate) fn forget(&mut self) {
        self.read = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::test_event;

    #[test]
    fn a_pause_holds_its_type_or_everything() {
        let mut e = test_event(1, "a");
        e.aggregate_type = "order".into();
        let none = Pauses::from_rows(vec![]);
        assert!(none.is_empty() && !none.hold(&e));
        let orders = Pauses::from_rows(vec![Some("order".into())]);
        assert!(orders.hold(&e));
        e.aggregate_type = "invoice".into();
        assert!(!orders.hold(&e));
        let all = Pauses::from_rows(vec![None, Some("order".into())]);
        assert!(all.hold(&e) && !all.is_empty());
    }
}
