//! Dead-letter tooling: list, count, retry and discard dead-lettered events.
//!
//! An event is dead-lettered when `dead_lettered_at IS NOT NULL AND
//! processed_at IS NULL` (the `outbox_dead_letters` view). Every operation
//! here is one statement.

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::value::RawValue;
use sqlx::postgres::PgRow;
use sqlx::{PgConnection, Row};
use uuid::Uuid;

use super::queries as q;
use super::selector::{Criteria, DeadLetterFilter, Selector};
use crate::error::{Error, Result};
use crate::schema::Schema;

/// One dead-lettered event.
#[derive(Debug, Clone, Serialize)]
pub struct DeadLetter {
    /// The event id.
    pub id: Uuid,
    /// Insertion order; a retried dead letter keeps it.
    pub seq: i64,
    /// The aggregate type, e.g. `order`.
    pub aggregate_type: String,
    /// The aggregate id.
    pub aggregate_id: String,
    /// The event type, e.g. `order.created`.
    pub event_type: String,
    /// The payload, as the JSON text PostgreSQL stores (never re-parsed, so
    /// numbers beyond `f64` and deep nesting are shown as they are).
    pub payload: Box<RawValue>,
    /// The headers (a JSON object, shown as stored).
    pub headers: Box<RawValue>,
    /// The topic override, if any.
    pub topic: Option<String>,
    /// Failed attempts before it was dead-lettered.
    pub attempts: i32,
    /// When the event was enqueued (its transaction's start time); `None`
    /// for a stored value no client can represent (`infinity`, or beyond
    /// year 100000), which only rows written before migration 2 can hold.
    pub created_at: Option<DateTime<Utc>>,
    /// When the event was dead-lettered; `None` as for `created_at`.
    pub dead_lettered_at: Option<DateTime<Utc>>,
    /// The publisher's last error.
    pub last_error: Option<String>,
}

impl DeadLetter {
    fn from_row(row: &PgRow) -> Result<Self> {
        Ok(DeadLetter {
            id: col(row, 0)?,
            seq: col(row, 1)?,
            aggregate_type: col(row, 2)?,
            aggregate_id: col(row, 3)?,
            event_type: col(row, 4)?,
            payload: json(col(row, 5)?),
            headers: json(col(row, 6)?),
            topic: col(row, 7)?,
            attempts: col(row, 8)?,
            created_at: col(row, 9)?,
            dead_lettered_at: col(row, 10)?,
            last_error: col(row, 11)?,
        })
    }
}

fn col<'r, T>(row: &'r PgRow, index: usize) -> Result<T>
where
    T: sqlx::Decode<'r, sqlx::Postgres> + sqlx::Type<sqlx::Postgres>,
{
    row.try_get(index)
        .map_err(Error::db("reading a dead letter"))
}

/// The JSON text PostgreSQL printed, kept as it is. (Anything that is not
/// JSON, which PostgreSQL never prints, would be kept as a JSON string
/// rather than lost.)
fn json(text: String) -> Box<RawValue> {
    RawValue::from_string(text.clone()).unwrap_or_else(|_| {
        RawValue::from_string(serde_json::Value::String(text).to_string())
            .expect("a JSON string is JSON")
    })
}

/// A page of dead letters.
#[derive(Debug, Clone, Serialize)]
pub struct DeadLetterPage {
    /// The dead letters, in seq order, at most the filter's limit.
    pub items: Vec<DeadLetter>,
    /// How many dead letters matched the filter, before the limit.
    pub total: u64,
}

/// List, count, retry and discard dead letters of one schema.
///
/// ```no_run
/// # async fn f(conn: &mut sqlx::PgConnection) -> outbox::Result<()> {
/// use outbox::{DeadLetters, Schema, Selector};
/// let dead = DeadLetters::new(&Schema::default());
/// // The broker bug is fixed: send every `order.created` again.
/// let n = dead.retry(conn, &Selector::default().event_type("order.created")).await?;
/// println!("retried {n} dead letters");
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct DeadLetters {
    list: String,
    page_ids: String,
    count: String,
    retry: String,
    discard: String,
    /// The relays' wake-up channel.
    channel: String,
}

impl DeadLetters {
    /// The dead letters of `schema`.
    pub fn new(schema: &Schema) -> Self {
        DeadLetters {
            list: schema.render(q::DEAD_LETTER_LIST),
            page_ids: schema.render(q::DEAD_LETTER_PAGE_IDS),
            count: schema.render(q::DEAD_LETTER_COUNT),
            retry: schema.render(q::DEAD_LETTER_RETRY),
            discard: schema.render(q::DEAD_LETTER_DISCARD),
            channel: schema.channel(),
        }
    }

    /// The dead letters matching `filter`, in seq order (their original
    /// order), at most `filter.limit`, with the number that matched.
    pub async fn list(
        &self,
        conn: &mut PgConnection,
        filter: &DeadLetterFilter,
    ) -> Result<DeadLetterPage> {
        filter.validate()?;
        let rows = Criteria::of(&filter.selector)
            .bind(sqlx::query(&self.list))
            .bind(i64::from(filter.limit))
            .fetch_all(conn)
            .await
            .map_err(Error::db("listing dead letters"))?;
        let total = rows.first().map_or(0, |r| r.get::<i64, _>(12)) as u64;
        let items = rows
            .iter()
            .map(DeadLetter::from_row)
            .collect::<Result<Vec<_>>>()?;
        Ok(DeadLetterPage { items, total })
    }

    /// One keyset page of the ids of the dead letters `selector`'s criteria
    /// select (its `all` flag aside) whose last error contains
    /// `error_contains` (case-insensitively; `None`: any), in seq order:
    /// seq above `after`, at most `limit`. What a list showing columns of
    /// its own (the console's) pages through, with the very predicate a
    /// retry or discard of these ids runs.
    pub async fn page_ids(
        &self,
        conn: &mut PgConnection,
        selector: &Selector,
        error_contains: Option<&str>,
        after: i64,
        limit: i64,
    ) -> Result<Vec<Uuid>> {
        let rows = Criteria::of(selector)
            .bind(sqlx::query(&self.page_ids))
            .bind(after)
            .bind(limit)
            .bind(error_contains)
            .fetch_all(conn)
            .await
            .map_err(Error::db("listing dead letters"))?;
        Ok(rows.iter().map(|r| r.get::<Uuid, _>(0)).collect())
    }

    /// How many dead letters `selector` selects (what a retry or discard
    /// would touch, were it run now).
    pub async fn count(&self, conn: &mut PgConnection, selector: &Selector) -> Result<u64> {
        selector.validate()?;
        let row = Criteria::of(selector)
            .bind(sqlx::query(&self.count))
            .fetch_one(conn)
            .await
            .map_err(Error::db("counting dead letters"))?;
        Ok(row.get::<i64, _>(0) as u64)
    }

    /// Puts the selected dead letters back in the queue, in one statement;
    /// returns how many.
    ///
    /// They keep their `seq`, so the relay delivers them in their original
    /// order among themselves and before any later, still pending event of
    /// their aggregate. Attempts restart from zero (the full
    /// `max_attempts` again); `last_error` is kept until the next attempt
    /// overwrites it. Order caveat: once a later event of the same
    /// aggregate has been delivered (it moved on after the dead-lettering),
    /// no retry can make this one arrive first; consumers see it late.
    /// Retry all dead letters of an aggregate in one call, so they keep
    /// their order among themselves. They come back due at once.
    /// The relays listening are woken once the retry is committed (a
    /// dormant source of a relay of many sources would otherwise find them
    /// only at its next full check); `conn` must not be inside a
    /// transaction the caller keeps open, or the wake-up comes at its
    /// commit.
    pub async fn retry(&self, conn: &mut PgConnection, selector: &Selector) -> Result<u64> {
        let n = Self::change(&self.retry, conn, selector, "retrying dead letters").await?;
        if n > 0 {
            if let Err(e) = sqlx::query(crate::queries::WAKEUP_NOTIFY)
                .bind(&self.channel)
                .execute(conn)
                .await
            {
                tracing::debug!(error = %e, "could not wake the relays after a retry; their polls find it");
            }
        }
        Ok(n)
    }

    /// Deletes the selected dead letters, in one statement; returns how
    /// many. They are gone for good: keep a copy first (`list`) if you need
    /// a record.
    pub async fn discard(&self, conn: &mut PgConnection, selector: &Selector) -> Result<u64> {
        Self::change(&self.discard, conn, selector, "discarding dead letters").await
    }

    /// Runs one changing statement (`retry`, `discard`) on the dead letters
    /// `selector` selects; returns how many rows it changed.
    async fn change(
        sql: &str,
        conn: &mut PgConnection,
        selector: &Selector,
        doing: &'static str,
    ) -> Result<u64> {
        selector.validate()?;
        let done = Criteria::of(selector)
            .bind(sqlx::query(sql))
            .execute(conn)
            .await
            .map_err(Error::db(doing))?;
        Ok(done.rows_affected())
    }
}
