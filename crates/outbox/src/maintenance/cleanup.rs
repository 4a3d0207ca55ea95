//! Retention-mode cleanup: deletes processed events and old inbox marks in
//! small batches, each its own short statement, so no lock is held for
//! long and concurrent cleaners share the work (`FOR UPDATE SKIP LOCKED`).

use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::{PgConnection, PgPool};

use super::age::format_age;
use super::queries as q;
use super::selector::millis;
use crate::error::{Error, Result};
use crate::schema::Schema;

/// Default rows per cleanup batch.
pub const DEFAULT_CLEANUP_BATCH_SIZE: u32 = 1_000;
/// Largest rows per cleanup batch.
pub const MAX_CLEANUP_BATCH_SIZE: u32 = 100_000;

/// How a cleanup run deletes: what is old enough, and how much per batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CleanupParams {
    /// Rows processed longer ago than this are deleted.
    pub older_than: Duration,
    /// Rows per batch (one short statement each), 1 to
    /// [`MAX_CLEANUP_BATCH_SIZE`].
    pub batch_size: u32,
}

impl CleanupParams {
    /// Deletes rows older than `older_than`, [`DEFAULT_CLEANUP_BATCH_SIZE`]
    /// per batch.
    pub fn older_than(older_than: Duration) -> Self {
        CleanupParams {
            older_than,
            batch_size: DEFAULT_CLEANUP_BATCH_SIZE,
        }
    }

    /// Checks the batch size; the error names the field, the value and the
    /// range.
    pub fn validate(&self) -> Result<()> {
        if self.batch_size == 0 || self.batch_size > MAX_CLEANUP_BATCH_SIZE {
            return Err(Error::invalid(
                "batch_size",
                format!(
                    "{} is out of range: use 1 to {MAX_CLEANUP_BATCH_SIZE}",
                    self.batch_size
                ),
            ));
        }
        Ok(())
    }
}

/// The table a cleanup works on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CleanupTarget {
    /// Processed events in `outbox_events` (retention mode).
    Events,
    /// Inbox marks in `processed_events`.
    Inbox,
}

impl CleanupTarget {
    /// The table's name, e.g. `outbox_events`.
    pub fn table(self) -> &'static str {
        match self {
            CleanupTarget::Events => "outbox_events",
            CleanupTarget::Inbox => "processed_events",
        }
    }
}

/// Deletes processed rows of one target in one schema, in short batches.
///
/// [`CleanupTarget::Events`]: events processed longer ago than
/// `older_than` (kept by a relay in retention mode); pending and
/// dead-lettered events are never touched. [`CleanupTarget::Inbox`]: inbox
/// marks (`processed_events`); once a mark is gone a redelivery of its event
/// is processed again, so keep marks longer than any redelivery can come.
/// [`Cleanup::run`] does the whole job; callers that drive the batches
/// themselves (to report progress, or to stop between batches) use the
/// lower-level methods.
///
/// ```no_run
/// # async fn f(pool: sqlx::PgPool) -> outbox::Result<()> {
/// use std::time::Duration;
/// use outbox::{Cleanup, CleanupParams, CleanupTarget, Schema};
/// let week = CleanupParams::older_than(Duration::from_secs(7 * 86_400));
/// let deleted = Cleanup::new(&Schema::default(), CleanupTarget::Events)
///     .run(&pool, &week)
///     .await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct Cleanup {
    target: CleanupTarget,
    delete_batch: String,
    count: String,
    cutoff: String,
}

impl Cleanup {
    /// Cleans `target` in `schema`.
    pub fn new(schema: &Schema, target: CleanupTarget) -> Self {
        let (delete, count) = match target {
            CleanupTarget::Events => (q::EVENT_DELETE_PROCESSED_BATCH, q::EVENT_COUNT_PROCESSED),
            CleanupTarget::Inbox => (q::INBOX_DELETE_BATCH, q::INBOX_COUNT),
        };
        Cleanup {
            target,
            delete_batch: schema.render(delete),
            count: schema.render(count),
            cutoff: schema.render(q::CLEANUP_CUTOFF),
        }
    }

    /// What this cleans.
    pub fn target(&self) -> CleanupTarget {
        self.target
    }

    /// The cut-off for rows older than `older_than`, on the database's
    /// clock. Fix it once per run, so a run deletes a known set of rows and
    /// ends even while new rows keep ageing past the period.
    pub async fn cutoff(
        &self,
        conn: &mut PgConnection,
        older_than: Duration,
    ) -> Result<DateTime<Utc>> {
        sqlx::query_scalar(&self.cutoff)
            .bind(millis(older_than))
            .fetch_one(conn)
            .await
            .map_err(Error::db("computing the cleanup cut-off"))
    }

    /// Rows older than `cutoff` (what a run would delete).
    pub async fn count(&self, conn: &mut PgConnection, cutoff: DateTime<Utc>) -> Result<u64> {
        let n: i64 = sqlx::query_scalar(&self.count)
            .bind(cutoff)
            .fetch_one(conn)
            .await
            .map_err(Error::db("counting rows to clean up"))?;
        Ok(n as u64)
    }

    /// Deletes at most `batch_size` rows older than `cutoff` in one short
    /// statement; returns how many. Fewer than `batch_size` means the run
    /// is done (or a concurrent cleaner holds the rest).
    pub async fn delete_batch(
        &self,
        conn: &mut PgConnection,
        cutoff: DateTime<Utc>,
        batch_size: u32,
    ) -> Result<u64> {
        let done = sqlx::query(&self.delete_batch)
            .bind(cutoff)
            .bind(i64::from(batch_size))
            .execute(conn)
            .await
            .map_err(Error::db("deleting a cleanup batch"))?;
        Ok(done.rows_affected())
    }

    /// Deletes every row older than `params.older_than`, batch by batch;
    /// returns how many.
    pub async fn run(&self, pool: &PgPool, params: &CleanupParams) -> Result<u64> {
        params.validate()?;
        let mut conn = pool.acquire().await.map_err(Error::db("connecting"))?;
        let cutoff = self.cutoff(&mut conn, params.older_than).await?;
        let mut total = 0;
        loop {
            let n = self
                .delete_batch(&mut conn, cutoff, params.batch_size)
                .await?;
            total += n;
            if n < u64::from(params.batch_size) {
                break;
            }
        }
        if total > 0 {
            tracing::info!(
                table = self.target.table(),
                deleted = total,
                older_than = %format_age(params.older_than),
                "cleanup deleted old rows"
            );
        }
        Ok(total)
    }
}
