//! The relay's database calls, one method per statement in
//! [`crate::queries`].

mod claim;
mod held;

use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use sqlx::pool::PoolConnection;
use sqlx::{PgPool, Postgres};
use uuid::Uuid;

pub use claim::Claimed;
pub use held::Held;

use crate::error::{Error, Result};
use crate::queries as q;
use crate::relay::replan::Replanned;
use crate::schema::Schema;

/// Rows to acknowledge: locations and ids, pairwise.
#[derive(Debug, Default, Clone)]
pub struct RowRefs {
    /// Row locations (`ctid` as text).
    pub ctids: Vec<String>,
    /// The events' ids.
    pub ids: Vec<Uuid>,
}

/// A failed event, as written by [`Store::event_mark_failed`].
#[derive(Debug, Clone)]
pub struct Failure {
    /// The event.
    pub id: Uuid,
    /// The last error, kept in `last_error`.
    pub error: String,
    /// Delay before the next attempt.
    pub delay: Duration,
    /// Dead-letter instead of retrying.
    pub dead: bool,
}

/// Statements rendered for one schema.
#[derive(Debug, Clone)]
pub struct Store {
    /// Where every call takes its connection (see [`held`]).
    held: Held,
    /// The claim with the plain xmin ([`q::SNAPSHOT_XMIN_PLAIN`]), and with
    /// the per-database one ([`q::SNAPSHOT_XMIN_HERE`]).
    ack_and_claim: Arc<Replanned>,
    ack_and_claim_wide: Arc<Replanned>,
    /// Whether the last claim's plain xmin fell short of what the cursor
    /// waited for: the next one then reads the per-database xmin.
    xmin_wide: Arc<AtomicBool>,
    next_retry: Arc<Replanned>,
    fresh_below: String,
    delete_delivered: String,
    mark_processed: String,
    mark_failed: String,
    idle_announce: String,
    xid_new: String,
    idle_retract: String,
    idle_trigger: String,
    ended_below: String,
    live: String,
    remove: String,
    renew: String,
    acquire: String,
    release: String,
    partition_count: String,
}

impl Store {
    /// Renders every statement for `schema`; `keep` selects retention mode.
    pub fn new(pool: PgPool, schema: &Schema, keep: bool) -> Self {
        let r = |s: &str| schema.render(s);
        let ack = if keep { q::ACK_KEEP } else { q::ACK_DELETE };
        Store {
            held: Held::new(pool),
            ack_and_claim: Replanned::new(r(&q::EVENT_ACK_AND_CLAIM
                .replace("{ack}", ack)
                .replace("{xmin}", q::SNAPSHOT_XMIN_PLAIN)
                .replace("{xmin_plain}", q::SNAPSHOT_XMIN_PLAIN))),
            ack_and_claim_wide: Replanned::new(r(&q::EVENT_ACK_AND_CLAIM
                .replace("{ack}", ack)
                .replace("{xmin}", &xmin_reaching("$7"))
                .replace("{xmin_plain}", q::SNAPSHOT_XMIN_PLAIN))),
            xmin_wide: Arc::new(AtomicBool::new(false)),
            next_retry: Replanned::new(r(q::EVENT_NEXT_RETRY_MS)),
            fresh_below: r(q::EVENT_FRESH_LOWEST_BELOW),
            delete_delivered: r(q::EVENT_DELETE_DELIVERED),
            mark_processed: r(q::EVENT_MARK_PROCESSED),
            mark_failed: r(q::EVENT_MARK_FAILED),
            idle_announce: r(q::IDLE_ANNOUNCE),
            xid_new: q::TRANSACTION_ID_NEW.to_owned(),
            idle_retract: r(q::IDLE_RETRACT),
            idle_trigger: r(q::IDLE_TRIGGER_INSTALLED),
            ended_below: q::TRANSACTIONS_ENDED_BELOW.replace("{xmin}", &xmin_reaching("$1")),
            live: r(q::INSTANCE_HEARTBEAT_AND_LIVE),
            remove: r(q::INSTANCE_REMOVE),
            renew: r(q::PARTITION_LEASE_RENEW),
            acquire: r(q::PARTITION_LEASE_ACQUIRE),
            release: r(q::PARTITION_RELEASE),
            partition_count: r(q::PARTITION_COUNT),
        }
    }

    /// Milliseconds until the earliest backoff in `partitions` ends, if any.
    pub async fn event_next_retry(&self, partitions: &[i32]) -> Result<Option<Duration>> {
        let sql = self.next_retry.sql();
        let ms: Option<i64> = sqlx::query_scalar(&sql)
            .bind(partitions)
            .fetch_one(&mut *self.connection().await?)
            .await
            .map_err(Error::db("reading the next retry time"))?;
        Ok(ms.map(|ms| Duration::from_millis(ms.max(0) as u64)))
    }

    /// The lowest fresh pending seq of `partitions` below `below`, if any
    /// (the claim cursor's look behind itself).
    pub async fn event_fresh_lowest_below(
        &self,
        partitions: &[i32],
        below: i64,
    ) -> Result<Option<i64>> {
        sqlx::query_scalar(&self.fresh_below)
            .bind(partitions)
            .bind(below)
            .fetch_one(&mut *self.connection().await?)
            .await
            .map_err(Error::db(
                "looking for pending events behind the claim cursor",
            ))
    }

    /// Marks acknowledged events done (deletes them, or sets
    /// `processed_at` when `keep`).
    pub async fn event_mark_delivered(&self, ids: &[Uuid], keep: bool) -> Result<u64> {
        let sql = if keep {
            &self.mark_processed
        } else {
            &self.delete_delivered
        };
        self.run(sqlx::query(sql).bind(ids), "acknowledging a batch")
            .await
    }

    /// Records failures in one statement, fenced by partition ownership.
    pub async fn event_mark_failed(
        &self,
        failures: &[Failure],
        owner: &str,
        epochs: &[i64],
    ) -> Result<u64> {
        let ids: Vec<Uuid> = failures.iter().map(|f| f.id).collect();
        let errors: Vec<&str> = failures.iter().map(|f| f.error.as_str()).collect();
        let delays: Vec<i64> = failures
            .iter()
            .map(|f| f.delay.as_millis().min(i64::MAX as u128) as i64)
            .collect();
        let dead: Vec<bool> = failures.iter().map(|f| f.dead).collect();
        let query = sqlx::query(&self.mark_failed)
            .bind(&ids)
            .bind(&errors)
            .bind(&delays)
            .bind(&dead)
            .bind(owner)
            .bind(epochs);
        self.run(query, "recording failed events").await
    }

    /// Announces that a relay sleeps, for `ttl`.
    pub async fn idle_announce(&self, ttl: Duration) -> Result<()> {
        let query = sqlx::query(&self.idle_announce).bind(ttl.as_millis() as i64);
        self.run(query, "announcing that the relay is idle")
            .await
            .map(drop)
    }

    /// A transaction id assigned now (after an announcement has returned,
    /// see [`Store::transactions_ended_below`]).
    pub async fn transaction_id_new(&self) -> Result<i64> {
        self.scalar(&self.xid_new, "taking a transaction id").await
    }

    /// Whether every transaction of this database with an id below `xid`
    /// has ended.
    pub async fn transactions_ended_below(&self, xid: i64) -> Result<bool> {
        sqlx::query_scalar(&self.ended_below)
            .bind(xid)
            .fetch_one(&mut *self.connection().await?)
            .await
            .map_err(Error::db("reading the oldest running transaction"))
    }

    /// Whether the schema's idle wake-up trigger is installed.
    pub async fn idle_trigger_installed(&self) -> Result<bool> {
        self.scalar(&self.idle_trigger, "looking for the wake-up trigger")
            .await
    }

    /// Withdraws the idle announcement (the only live relay has work).
    pub async fn idle_retract(&self) -> Result<()> {
        self.execute(&self.idle_retract, "withdrawing the idle announcement")
            .await
    }

    /// Refreshes this instance's heartbeat; returns the live instances,
    /// this one included, sorted.
    pub async fn instance_heartbeat_and_live(
        &self,
        me: &str,
        lease: Duration,
    ) -> Result<Vec<String>> {
        sqlx::query_scalar(&self.live)
            .bind(lease.as_millis() as f64)
            .bind(me)
            .fetch_all(&mut *self.connection().await?)
            .await
            .map_err(Error::db("listing relay instances"))
    }

    /// Removes this instance from the membership table.
    pub async fn instance_remove(&self, me: &str) -> Result<()> {
        let query = sqlx::query(&self.remove).bind(me);
        self.run(query, "leaving the relay group").await.map(drop)
    }

    /// Renews leases; returns `(partition, epoch)` of those still held.
    pub async fn partition_lease_renew(
        &self,
        me: &str,
        partitions: &[i32],
        lease: Duration,
    ) -> Result<Vec<(i32, i64)>> {
        self.lease_call(&self.renew, me, partitions, lease, "renewing leases")
            .await
    }

    /// Acquires leases; returns `(partition, epoch)` of those taken.
    pub async fn partition_lease_acquire(
        &self,
        me: &str,
        partitions: &[i32],
        lease: Duration,
    ) -> Result<Vec<(i32, i64)>> {
        self.lease_call(&self.acquire, me, partitions, lease, "acquiring leases")
            .await
    }

    async fn lease_call(
        &self,
        sql: &str,
        me: &str,
        partitions: &[i32],
        lease: Duration,
        during: &'static str,
    ) -> Result<Vec<(i32, i64)>> {
        // No partitions asked for: no statement.
        if partitions.is_empty() {
            return Ok(Vec::new());
        }
        sqlx::query_as(sql)
            .bind(me)
            .bind(partitions)
            .bind(lease.as_millis() as f64)
            .fetch_all(&mut *self.connection().await?)
            .await
            .map_err(Error::db(during))
    }

    /// Asks the other instances for a lease round now.
    pub async fn rebalance_notify(&self, channel: &str) -> Result<()> {
        let query = sqlx::query(q::REBALANCE_NOTIFY).bind(channel);
        self.run(query, "announcing a rebalance").await.map(drop)
    }

    /// Releases partitions.
    pub async fn partition_release(&self, me: &str, partitions: &[i32]) -> Result<()> {
        if partitions.is_empty() {
            return Ok(());
        }
        let query = sqlx::query(&self.release).bind(me).bind(partitions);
        self.run(query, "releasing partitions").await.map(drop)
    }

    /// The schema's partition count.
    pub async fn partition_count(&self) -> Result<i32> {
        self.scalar(&self.partition_count, "reading the partition count")
            .await
    }

    /// Gives the connection kept for the next claim back to the pool (the
    /// relay stops).
    pub fn connection_release(&self) {
        self.held.release();
    }

    /// A connection for one call: the one kept by the last claim, or one
    /// from the pool.
    async fn connection(&self) -> Result<PoolConnection<Postgres>> {
        self.held
            .connection()
            .await
            .map_err(Error::db("taking a connection from the pool"))
    }

    /// Runs `sql`, which takes no parameters and returns one value.
    async fn scalar<T>(&self, sql: &str, during: &'static str) -> Result<T>
    where
        T: for<'r> sqlx::Decode<'r, sqlx::Postgres> + sqlx::Type<sqlx::Postgres> + Send + Unpin,
    {
        sqlx::query_scalar(sql)
            .fetch_one(&mut *self.connection().await?)
            .await
            .map_err(Error::db(during))
    }

    /// Runs `sql`, which takes no parameters and returns no rows.
    async fn execute(&self, sql: &str, during: &'static str) -> Result<()> {
        self.run(sqlx::query(sql), during).await.map(drop)
    }

    /// Runs `query` (its parameters bound), which returns no rows; returns
    /// how many rows it changed.
    async fn run(
        &self,
        query: sqlx::query::Query<'_, sqlx::Postgres, sqlx::postgres::PgArguments>,
        during: &'static str,
    ) -> Result<u64> {
        let mut conn = self.connection().await?;
        let done = query.execute(&mut *conn).await.map_err(Error::db(during))?;
        Ok(done.rows_affected())
    }
}

/// [`q::SNAPSHOT_XMIN_HERE`] waiting for the id in parameter `param`.
fn xmin_reaching(param: &str) -> String {
    q::SNAPSHOT_XMIN_HERE.replace("{waiting_for}", param)
}
