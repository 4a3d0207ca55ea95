//! What the console reads and writes, one method per statement of
//! `queries.rs` (noun first, as the relay's store). Reads run in a
//! read-only transaction with a statement timeout, so the console can
//! neither change an event by mistake nor hold a snapshot for long; it
//! never takes a partition lease.

use std::sync::{Arc, Mutex};

use anyhow::{Context, Result};
use chrono::{DateTime, Utc};
use outbox::{DeadLetters, Schema, Selector};
use sqlx::postgres::PgRow;
use sqlx::{PgPool, Postgres, Row, Transaction};
use uuid::Uuid;

use super::count::{Count, COUNT_BOUND};
use super::queries as q;
use super::rate::{self, Deletions, Rate};

/// A console read's settings: it runs 5 s at most; each statement is
/// planned with its values (an unused optional criterion folds away, a
/// state's test meets its partial index); none is costly enough to repay
/// compiling it (JIT took ~10 ms of a 100 ms overview on a large table).
const READ_SETTINGS: &str = "SELECT set_config('statement_timeout', '5s', true), \
     set_config('plan_cache_mode', 'force_custom_plan', true), set_config('jit', 'off', true)";
/// Oldest failing events of each kind the stuck aggregates are found among.
const STUCK_AMONG: i64 = 2_000;

/// The overview's figures.
#[derive(Debug, Clone)]
pub struct Overview {
    pub pending: Count,
    pub retrying: Count,
    pub dead_letters: Count,
    /// Delivered per second over the last minute, when known.
    pub delivered: Option<Rate>,
    /// Age of the oldest event that can be claimed now
    /// (`outbox::Status::oldest_claimable_age`).
    pub oldest_claimable_s: Option<f64>,
    /// Age of this database's oldest snapshot
    /// (`outbox::Status::oldest_snapshot_age`).
    pub oldest_xact_s: Option<f64>,
    /// Transactions between the oldest snapshot's xmin and now.
    pub oldest_xmin_age: Option<i64>,
    pub relays: Vec<Relay>,
    /// Partitions without a live lease, with their last owner.
    pub unowned: Vec<(i32, Option<String>)>,
    pub pauses: Vec<Pause>,
    /// The delivery mode, and the WAL mode's slot on one line.
    pub delivery: String,
}

/// A relay instance and what it holds.
#[derive(Debug, Clone)]
pub struct Relay {
    pub instance: String,
    pub heartbeat_at: Option<String>,
    pub heartbeat_age_ms: i64,
    pub started_at: Option<String>,
    pub partitions: Vec<i32>,
    pub max_epoch: Option<i64>,
    /// Earliest lease expiry among its partitions, ms from now.
    pub lease_left_ms: Option<i64>,
}

/// A pause in force; `aggregate_type` `None` is the whole outbox.
#[derive(Debug, Clone)]
pub struct Pause {
    pub aggregate_type: Option<String>,
    pub paused_at: Option<String>,
    pub paused_by: String,
}

/// An aggregate held up by a failing event.
#[derive(Debug, Clone)]
pub struct Stuck {
    pub aggregate_type: String,
    pub aggregate_id: String,
    pub id: Uuid,
    pub event_type: String,
    pub attempts: i32,
    pub last_error: Option<String>,
    pub next_attempt_at: Option<String>,
    pub dead_lettered_at: Option<String>,
    /// Live events of the aggregate pending behind it.
    pub behind: i64,
}

/// An event's columns, payload and headers aside.
#[derive(Debug, Clone)]
pub struct EventRow {
    pub id: Uuid,
    pub seq: i64,
    pub aggregate_type: String,
    pub aggregate_id: String,
    pub event_type: String,
    pub attempts: i32,
    pub last_error: Option<String>,
    pub topic: Option<String>,
    pub partition: i32,
    pub created_at: Option<String>,
    pub processed_at: Option<String>,
    pub next_attempt_at: Option<String>,
    pub dead_lettered_at: Option<String>,
    /// `pending`, `retrying`, `processed` or `dead`.
    pub state: String,
}

impl EventRow {
    fn from_row(r: &PgRow) -> Result<Self> {
        Ok(EventRow {
            id: r.try_get(0)?,
            seq: r.try_get(1)?,
            aggregate_type: r.try_get(2)?,
            aggregate_id: r.try_get(3)?,
            event_type: r.try_get(4)?,
            attempts: r.try_get(5)?,
            last_error: r.try_get(6)?,
            topic: r.try_get(7)?,
            partition: r.try_get(8)?,
            created_at: r.try_get(9)?,
            processed_at: r.try_get(10)?,
            next_attempt_at: r.try_get(11)?,
            dead_lettered_at: r.try_get(12)?,
            state: r.try_get(13)?,
        })
    }
}

/// One event with its payload and headers as PostgreSQL prints them.
#[derive(Debug, Clone)]
pub struct EventDetail {
    pub row: EventRow,
    pub payload: String,
    pub headers: String,
}

/// The event search's criteria (all optional) and keyset position.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct EventQuery {
    pub aggregate_type: Option<String>,
    pub aggregate_id: Option<String>,
    pub event_type: Option<String>,
    pub from: Option<DateTime<Utc>>,
    pub to: Option<DateTime<Utc>>,
    pub state: Option<String>,
    /// Rows with a seq above this one.
    pub after: i64,
}

/// A page of rows and whether more follow.
#[derive(Debug, Clone)]
pub struct Page<T> {
    pub items: Vec<T>,
    /// The seq to continue after, when there is a next page.
    pub next_after: Option<i64>,
}

fn page(mut items: Vec<EventRow>, size: usize) -> Page<EventRow> {
    let more = items.len() > size;
    items.truncate(size);
    let next_after = if more {
        items.last().map(|r| r.seq)
    } else {
        None
    };
    Page { items, next_after }
}

/// The console's statements for one schema.
#[derive(Clone)]
pub struct Store {
    pool: PgPool,
    schema: Schema,
    pub dead: DeadLetters,
    counts: String,
    estimates: String,
    delivered_kept: String,
    deleted_total: String,
    /// The deleted-row samples of this console's overview reads.
    deletions: Arc<Mutex<Deletions>>,
    relays: String,
    unowned: String,
    pauses: String,
    pause_add: String,
    pause_remove: String,
    stuck: String,
    event_by_id: String,
    event_search: String,
    estimate: String,
    dead_page: String,
}

impl Store {
    pub fn new(pool: PgPool, schema: &Schema) -> Self {
        let r = |sql: &str| sql.replace("{schema}", schema.name());
        Store {
            pool,
            schema: schema.clone(),
            dead: DeadLetters::new(schema),
            counts: r(q::OVERVIEW_COUNTS),
            estimates: r(q::OVERVIEW_ESTIMATES),
            delivered_kept: r(q::DELIVERED_KEPT),
            deleted_total: r(q::DELETED_TOTAL),
            deletions: Arc::default(),
            relays: r(q::OVERVIEW_RELAYS),
            unowned: r(q::OVERVIEW_UNOWNED),
            pauses: r(q::PAUSE_LIST),
            pause_add: r(q::PAUSE_ADD),
            pause_remove: r(q::PAUSE_REMOVE),
            stuck: r(q::STUCK_AGGREGATES),
            event_by_id: r(q::EVENT_BY_ID),
            event_search: r(q::EVENT_SEARCH),
            estimate: r(q::EVENT_ESTIMATE),
            dead_page: r(q::DEAD_LETTER_PAGE),
        }
    }

    async fn read(&self) -> Result<Transaction<'static, Postgres>> {
        let mut tx = self.pool.begin().await.context("starting a read")?;
        sqlx::query("SET TRANSACTION READ ONLY")
            .execute(&mut *tx)
            .await?;
        sqlx::query(READ_SETTINGS).execute(&mut *tx).await?;
        Ok(tx)
    }

    pub async fn overview(&self) -> Result<Overview> {
        let mut tx = self.read().await?;
        let c = sqlx::query(&self.counts)
            .bind(COUNT_BOUND + 1)
            .fetch_one(&mut *tx)
            .await
            .context("reading the overview's counts")?;
        let counted: [i64; 3] = [c.try_get(0)?, c.try_get(1)?, c.try_get(2)?];
        let mut estimates = [None; 3];
        if counted.iter().any(|n| *n > COUNT_BOUND) {
            let e = sqlx::query(&self.estimates)
                .fetch_one(&mut *tx)
                .await
                .context("reading the estimates")?;
            estimates = [e.try_get(0)?, e.try_get(1)?, e.try_get(2)?];
        }
        let [pending, retrying, dead_letters] =
            [0, 1, 2].map(|i| Count::from_bounded(counted[i], COUNT_BOUND, estimates[i]));
        let delivered = self.delivered_in(&mut tx).await?;
        let relays = sqlx::query(&self.relays)
            .fetch_all(&mut *tx)
            .await
            .context("reading the relays")?
            .iter()
            .map(|r| {
                Ok(Relay {
                    instance: r.try_get(0)?,
                    heartbeat_at: r.try_get(1)?,
                    heartbeat_age_ms: r.try_get(2)?,
                    started_at: r.try_get(3)?,
                    partitions: r.try_get(4)?,
                    max_epoch: r.try_get(5)?,
                    lease_left_ms: r.try_get(6)?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let unowned = sqlx::query(&self.unowned)
            .fetch_all(&mut *tx)
            .await
            .context("reading unowned partitions")?
            .iter()
            .map(|r| Ok((r.try_get(0)?, r.try_get(1)?)))
            .collect::<Result<Vec<_>>>()?;
        let pauses = self.pause_list_in(&mut tx).await?;
        let (mode, slot) = outbox::Status::delivery(&mut tx, &self.schema)
            .await
            .context("reading the delivery mode")?;
        // 0 is "none": shown as "-".
        let shown = |age: f64| Some(age).filter(|a| *a > 0.0);
        let oldest_claimable = outbox::Status::oldest_claimable_age(&mut tx, &self.schema)
            .await
            .context("reading the oldest claimable event")?;
        let oldest_snapshot = outbox::Status::oldest_snapshot_age(&mut tx)
            .await
            .context("reading the oldest snapshot")?;
        Ok(Overview {
            delivery: crate::delivery::shown(mode, slot.as_ref()),
            pending,
            retrying,
            dead_letters,
            delivered,
            oldest_claimable_s: shown(oldest_claimable),
            oldest_xact_s: shown(oldest_snapshot),
            oldest_xmin_age: c.try_get(3)?,
            relays,
            unowned,
            pauses,
        })
    }

    /// The delivery rate: from kept rows when the last minute has any,
    /// else from the table's deleted-row count sampled at each read.
    async fn delivered_in(&self, tx: &mut Transaction<'static, Postgres>) -> Result<Option<Rate>> {
        let kept = sqlx::query(&self.delivered_kept)
            .bind(rate::KEPT_BOUND)
            .fetch_one(&mut **tx)
            .await
            .context("reading recent deliveries")?;
        let deleted: Option<i64> = sqlx::query_scalar(&self.deleted_total)
            .fetch_optional(&mut **tx)
            .await
            .context("reading the table's statistics")?
            .flatten();
        // Sampled at every read, so the deletion rate is ready whenever
        // kept rows stop (or never were).
        let by_deletions = deleted.and_then(|total| {
            self.deletions
                .lock()
                .expect("deletion samples")
                .observe(std::time::Instant::now(), total)
        });
        Ok(rate::from_kept(kept.try_get(0)?, kept.try_get(1)?).or(by_deletions))
    }

    async fn pause_list_in(&self, tx: &mut Transaction<'static, Postgres>) -> Result<Vec<Pause>> {
        sqlx::query(&self.pauses)
            .fetch_all(&mut **tx)
            .await
            .context("reading pauses")?
            .iter()
            .map(|r| {
                Ok(Pause {
                    aggregate_type: r.try_get(0)?,
                    paused_at: r.try_get(1)?,
                    paused_by: r.try_get(2)?,
                })
            })
            .collect()
    }

    /// Pauses `aggregate_type` (`None`: everything); false if it already was.
    pub async fn pause_add(&self, aggregate_type: Option<&str>, by: &str) -> Result<bool> {
        let done = sqlx::query(&self.pause_add)
            .bind(aggregate_type)
            .bind(by)
            .execute(&self.pool)
            .await
            .context("pausing")?;
        Ok(done.rows_affected() > 0)
    }

    /// Resumes `aggregate_type` (`None`: the whole-outbox pause): whether
    /// a pause was lifted, and whether a switch back to the table mode
    /// keeps everything paused (it is not the console's to lift).
    pub async fn pause_remove(&self, aggregate_type: Option<&str>) -> Result<(bool, bool)> {
        let (lifted, switching): (i64, bool) = sqlx::query_as(&self.pause_remove)
            .bind(aggregate_type)
            .fetch_one(&self.pool)
            .await
            .context("resuming")?;
        Ok((lifted > 0, switching))
    }

    pub async fn stuck_list(&self, limit: i64) -> Result<Vec<Stuck>> {
        let mut tx = self.read().await?;
        sqlx::query(&self.stuck)
            .bind(limit)
            .bind(STUCK_AMONG)
            .fetch_all(&mut *tx)
            .await
            .context("reading stuck aggregates")?
            .iter()
            .map(|r| {
                Ok(Stuck {
                    aggregate_type: r.try_get(0)?,
                    aggregate_id: r.try_get(1)?,
                    id: r.try_get(2)?,
                    event_type: r.try_get(3)?,
                    attempts: r.try_get(4)?,
                    last_error: r.try_get(5)?,
                    next_attempt_at: r.try_get(6)?,
                    dead_lettered_at: r.try_get(7)?,
                    behind: r.try_get(8)?,
                })
            })
            .collect()
    }

    pub async fn event_get(&self, id: Uuid) -> Result<Option<EventDetail>> {
        let mut tx = self.read().await?;
        let row = sqlx::query(&self.event_by_id)
            .bind(id)
            .fetch_optional(&mut *tx)
            .await
            .context("reading the event")?;
        row.map(|r| {
            Ok(EventDetail {
                row: EventRow::from_row(&r)?,
                payload: r.try_get(14)?,
                headers: r.try_get(15)?,
            })
        })
        .transpose()
    }

    /// One page of the search, and the planner's estimate of the table's
    /// rows.
    pub async fn event_search(
        &self,
        query: &EventQuery,
        size: usize,
    ) -> Result<(Page<EventRow>, i64)> {
        let mut tx = self.read().await?;
        let rows = sqlx::query(&self.event_search)
            .bind(&query.aggregate_type)
            .bind(&query.aggregate_id)
            .bind(&query.event_type)
            .bind(query.from)
            .bind(query.to)
            .bind(&query.state)
            .bind(query.after)
            .bind(size as i64 + 1)
            .fetch_all(&mut *tx)
            .await
            .context("searching events")?;
        let items = rows
            .iter()
            .map(EventRow::from_row)
            .collect::<Result<Vec<_>>>()?;
        let estimate: Option<i64> = sqlx::query_scalar(&self.estimate)
            .fetch_one(&mut *tx)
            .await
            .context("estimating the table's rows")?;
        Ok((page(items, size), estimate.unwrap_or(0)))
    }

    /// One keyset page of the dead letters `selector`'s criteria and
    /// `error` text match (the selector's `all` flag aside), after seq
    /// `after`.
    pub async fn dead_letter_page(
        &self,
        selector: &Selector,
        error: Option<&str>,
        after: i64,
        size: usize,
    ) -> Result<Page<EventRow>> {
        let mut tx = self.read().await?;
        let ids = self
            .dead
            .page_ids(&mut tx, selector, error, after, size as i64 + 1)
            .await
            .context("listing dead letters")?;
        let rows = sqlx::query(&self.dead_page)
            .bind(&ids)
            .fetch_all(&mut *tx)
            .await
            .context("listing dead letters")?;
        let items = rows
            .iter()
            .map(EventRow::from_row)
            .collect::<Result<Vec<_>>>()?;
        Ok(page(items, size))
    }

    /// The ids of at most `max` dead letters `selector` and `error` match,
    /// in seq order.
    pub async fn dead_letter_ids(
        &self,
        selector: &Selector,
        error: Option<&str>,
        max: usize,
    ) -> Result<Vec<Uuid>> {
        let mut tx = self.read().await?;
        self.dead
            .page_ids(&mut tx, selector, error, 0, max as i64)
            .await
            .context("listing dead letters")
    }

    /// A connection for the dead-letter actions (the library's methods).
    pub async fn conn(&self) -> Result<sqlx::pool::PoolConnection<Postgres>> {
        self.pool.acquire().await.context("connecting")
    }
}
