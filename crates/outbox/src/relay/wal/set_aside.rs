//! The WAL reader's slow path: events that cannot be published now without
//! breaking their aggregate's order, or that failed, become rows of
//! `outbox_events`, where the table mode's retries, backoff, dead letters,
//! console and `dead-letters retry|discard` apply to them unchanged. Only
//! once they are stored does the slot move past them.

use std::collections::HashSet;
use std::time::Duration;

use sqlx::{Connection, PgPool};

use crate::error::{Error, Result};
use crate::event::Event;
use crate::queries as q;
use crate::schema::Schema;

/// Why an event is set aside.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Aside {
    /// An earlier event of its aggregate is in the table: it waits there
    /// behind it, no attempt counted.
    Behind,
    /// Its publish failed; retried after `delay` (an attempt counted).
    Retry { error: String, delay: Duration },
    /// Rejected, or out of attempts: a dead letter.
    Dead { error: String },
}

/// The table the WAL reader sets events aside in.
#[derive(Debug, Clone)]
pub(crate) struct SetAside {
    pool: PgPool,
    insert: String,
    pending: String,
    pending_among: String,
}

impl SetAside {
    pub(crate) fn new(pool: PgPool, schema: &Schema) -> Self {
        SetAside {
            pool,
            insert: schema.render(q::WAL_EVENTS_SET_ASIDE),
            pending: schema.render(q::WAL_AGGREGATES_PENDING),
            pending_among: schema.render(q::WAL_AGGREGATES_PENDING_AMONG),
        }
    }

    /// Every aggregate with an event waiting in the table, as a reader
    /// that has just taken slot `slot` reads them: after every set-aside of
    /// an earlier reader has committed or been fenced out.
    pub(crate) async fn aggregates_pending(&self, slot: &str) -> Result<HashSet<String>> {
        let failed = || Error::db("reading the aggregates waiting in the table");
        let mut tx = self.pool.begin().await.map_err(failed())?;
        sqlx::query(q::WAL_READER_TAKEOVER)
            .bind(slot)
            .execute(&mut *tx)
            .await
            .map_err(failed())?;
        let ids: Vec<String> = sqlx::query_scalar(&self.pending)
            .fetch_all(&mut *tx)
            .await
            .map_err(failed())?;
        tx.commit().await.map_err(failed())?;
        Ok(ids.into_iter().collect())
    }

    /// Which of `among` still have an event waiting in the table.
    pub(crate) async fn aggregates_pending_among(&self, among: &[&str]) -> Result<HashSet<String>> {
        let ids: Vec<String> = sqlx::query_scalar(&self.pending_among)
            .bind(among)
            .fetch_all(&self.pool)
            .await
            .map_err(Error::db("reading the aggregates waiting in the table"))?;
        Ok(ids.into_iter().collect())
    }

    /// Stores `events` as rows, in the given order, in one transaction,
    /// if the reader's session (walsender `pid`) still holds slot `slot`.
    /// `Ok(false)`: it does not, and nothing was stored.
    pub(crate) async fn events_set_aside(
        &self,
        events: &[(Event, Aside)],
        slot: &str,
        pid: i32,
    ) -> Result<bool> {
        if events.is_empty() {
            return Ok(true);
        }
        let n = events.len();
        let mut cols = Columns::with_capacity(n);
        for (e, why) in events {
            cols.push(e, why);
        }
        let mut conn = self
            .pool
            .acquire()
            .await
            .map_err(Error::db("setting events aside"))?;
        let mut tx = conn
            .begin()
            .await
            .map_err(Error::db("setting events aside"))?;
        let holds: bool = sqlx::query_scalar(q::WAL_READER_FENCE)
            .bind(slot)
            .bind(pid)
            .fetch_one(&mut *tx)
            .await
            .map_err(Error::db("setting events aside"))?;
        if !holds {
            return Ok(false);
        }
        sqlx::query(q::WAL_TABLE_WRITE)
            .execute(&mut *tx)
            .await
            .map_err(Error::db("setting events aside"))?;
        sqlx::query(&self.insert)
            .bind(&cols.ids)
            .bind(&cols.types)
            .bind(&cols.aggregates)
            .bind(&cols.kinds)
            .bind(&cols.payloads)
            .bind(&cols.headers)
            .bind(&cols.topics)
            .bind(&cols.created)
            .bind(&cols.attempts)
            .bind(&cols.delays)
            .bind(&cols.errors)
            .bind(&cols.dead)
            .execute(&mut *tx)
            .await
            .map_err(Error::db("setting events aside"))?;
        tx.commit()
            .await
            .map_err(Error::db("setting events aside"))?;
        Ok(true)
    }
}

/// The insert's arrays, one per column.
struct Columns<'e> {
    ids: Vec<uuid::Uuid>,
    types: Vec<&'e str>,
    aggregates: Vec<&'e str>,
    kinds: Vec<&'e str>,
    payloads: Vec<&'e str>,
    headers: Vec<String>,
    topics: Vec<Option<&'e str>>,
    created: Vec<chrono::DateTime<chrono::Utc>>,
    attempts: Vec<i32>,
    delays: Vec<Option<i64>>,
    errors: Vec<Option<&'e str>>,
    dead: Vec<bool>,
}

impl<'e> Columns<'e> {
    fn with_capacity(n: usize) -> Self {
        Columns {
            ids: Vec::with_capacity(n),
            types: Vec::with_capacity(n),
            aggregates: Vec::with_capacity(n),
            kinds: Vec::with_capacity(n),
            payloads: Vec::with_capacity(n),
            headers: Vec::with_capacity(n),
            topics: Vec::with_capacity(n),
            created: Vec::with_capacity(n),
            attempts: Vec::with_capacity(n),
            delays: Vec::with_capacity(n),
            errors: Vec::with_capacity(n),
            dead: Vec::with_capacity(n),
        }
    }

    fn push(&mut self, e: &'e Event, why: &'e Aside) {
        self.ids.push(e.id);
        self.types.push(&e.aggregate_type);
        self.aggregates.push(&e.aggregate_id);
        self.kinds.push(&e.event_type);
        self.payloads.push(&e.payload);
        // The headers as the producer wrote them: a map of strings, which
        // is what the message carried after decoding.
        self.headers
            .push(serde_json::to_string(&e.headers).unwrap_or_else(|_| "{}".to_owned()));
        self.topics.push(e.topic.as_deref());
        self.created.push(e.created_at);
        let (attempts, delay, error, dead) = match why {
            Aside::Behind => (e.attempts, None, None, false),
            Aside::Retry { error, delay } => (
                e.attempts + 1,
                Some(delay.as_millis().min(i64::MAX as u128) as i64),
                Some(error.as_str()),
                false,
            ),
            Aside::Dead { error } => (e.attempts + 1, None, Some(error.as_str()), true),
        };
        self.attempts.push(attempts);
        self.delays.push(delay);
        self.errors.push(error);
        self.dead.push(dead);
    }
}
