//! The state of an outbox at a glance (`outbox status`).

use serde::Serialize;
use sqlx::{PgConnection, Row};

use crate::error::{Error, Result};
use crate::queries as q;
use crate::schema::Schema;
use crate::wal::DeliveryMode;

/// Who holds one partition.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct PartitionOwner {
    /// The partition number.
    pub partition: i32,
    /// The holding instance, if any.
    pub owner: Option<String>,
    /// The fencing epoch (bumped at every change of owner).
    pub epoch: i64,
    /// Milliseconds left on the lease (negative when expired).
    pub lease_ms_left: Option<i64>,
}

/// The WAL mode's replication slot, as the server sees it.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct SlotStatus {
    /// The slot's name.
    pub name: String,
    /// Whether the slot exists on the server (dropped by hand, or lost in
    /// a failover, it does not).
    pub exists: bool,
    /// Whether a session (a relay) reads it now.
    pub active: bool,
    /// Bytes of WAL from the slot's confirmed position to the server's
    /// current one: what the relay has still to read and confirm.
    pub lag_bytes: Option<i64>,
    /// Bytes of WAL the slot keeps the server from removing.
    pub retained_bytes: Option<i64>,
    /// The lag its walsender reports, in seconds (while read, and behind).
    pub lag_seconds: Option<f64>,
    /// Whether a switch back to the table mode waits for the relay to read
    /// the slot to it.
    pub switching_to_table: bool,
    /// Whether the server invalidated the slot (it held more WAL than
    /// `max_slot_wal_keep_size` allows): what it held past its confirmed
    /// position cannot be read.
    pub invalidated: bool,
    /// Whether the switch back to the table mode still waits for
    /// transactions older than it (`outbox migrate --mode table` stopped
    /// before writing its mark; running it again resumes).
    pub switch_waits_for_transactions: bool,
}

/// Counters and owners of one outbox schema.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Status {
    /// The schema.
    pub schema: String,
    /// Events not yet delivered (including those waiting out a backoff).
    pub pending: i64,
    /// Pending events that failed at least once and wait for a retry.
    pub retrying: i64,
    /// Dead-lettered events (see the `outbox_dead_letters` view).
    pub dead_letters: i64,
    /// Age of the oldest pending event, in seconds.
    pub oldest_pending_age_seconds: Option<f64>,
    /// Partition owners.
    pub partitions: Vec<PartitionOwner>,
    /// The delivery mode: `table` or `wal`.
    pub mode: String,
    /// The WAL mode's slot, while the schema has one (in the WAL mode, or
    /// switched back and not yet read to the switch).
    pub slot: Option<SlotStatus>,
    /// Seconds the oldest claimable event has waited (0 when none):
    /// [`Status::oldest_claimable_age`].
    pub oldest_claimable_age_seconds: f64,
    /// Seconds since the oldest snapshot that holds back vacuum in this
    /// database was taken (0 when none): [`Status::oldest_snapshot_age`].
    pub oldest_snapshot_age_seconds: f64,
    /// The pauses in force: an aggregate type each, `None` for the whole
    /// outbox.
    pub paused: Vec<Option<String>>,
}

impl Status {
    /// Reads the status; fails with [`Error::NotMigrated`] on an empty
    /// schema.
    pub async fn read(conn: &mut PgConnection, schema: &Schema) -> Result<Status> {
        crate::migrate::ensure_migrated(conn, schema).await?;
        let row = sqlx::query(&schema.render(q::STATUS_COUNTS))
            .fetch_one(&mut *conn)
            .await
            .map_err(Error::db("reading the status"))?;
        let partitions = sqlx::query(&schema.render(q::STATUS_PARTITIONS))
            .fetch_all(&mut *conn)
            .await
            .map_err(Error::db("reading partition owners"))?
            .into_iter()
            .map(|r| PartitionOwner {
                partition: r.get(0),
                owner: r.get(1),
                epoch: r.get(2),
                lease_ms_left: r.get(3),
            })
            .collect();
        let (mode, slot) = Status::delivery(conn, schema).await?;
        let paused: Vec<Option<String>> = sqlx::query_scalar(&schema.render(q::PAUSES_IN_FORCE))
            .fetch_all(&mut *conn)
            .await
            .map_err(Error::db("reading the pauses"))?;
        Ok(Status {
            oldest_claimable_age_seconds: Status::oldest_claimable_age(conn, schema).await?,
            oldest_snapshot_age_seconds: Status::oldest_snapshot_age(conn).await?,
            paused,
            mode: mode.name().to_owned(),
            slot,
            schema: schema.name().to_owned(),
            pending: row.get(0),
            retrying: row.get(1),
            dead_letters: row.get(2),
            oldest_pending_age_seconds: row.get(3),
            partitions,
        })
    }

    /// The schema's delivery mode and, while it has one, its replication
    /// slot as the server sees it.
    pub async fn delivery(
        conn: &mut PgConnection,
        schema: &Schema,
    ) -> Result<(DeliveryMode, Option<SlotStatus>)> {
        let mode = crate::migrate::installed_delivery(conn, schema).await?;
        let slot = sqlx::query(&schema.render(q::STATUS_SLOT))
            .fetch_optional(&mut *conn)
            .await
            .map_err(Error::db("reading the replication slot"))?
            .map(|r| SlotStatus {
                name: r.get(0),
                exists: r.get(1),
                active: r.get(2),
                lag_bytes: r.get(3),
                retained_bytes: r.get(4),
                lag_seconds: r.get(5),
                switching_to_table: r.get(6),
                invalidated: r.get(7),
                switch_waits_for_transactions: r.get(8),
            });
        Ok((mode, slot))
    }

    /// The server's WAL position now (an LSN, as text): give it to
    /// [`Status::slot_confirmed_to`] later to learn whether the schema's
    /// slot has been read past everything written before it.
    pub async fn wal_end(conn: &mut PgConnection) -> Result<String> {
        sqlx::query_scalar(q::WAL_END)
            .fetch_one(conn)
            .await
            .map_err(Error::db("reading the server's WAL position"))
    }

    /// Whether the schema's replication slot is confirmed to `lsn` (from
    /// [`Status::wal_end`]): every event emitted before it has been
    /// delivered, or set aside in the table (where [`Status::pending`]
    /// counts it). True for a schema without a slot.
    pub async fn slot_confirmed_to(
        conn: &mut PgConnection,
        schema: &Schema,
        lsn: &str,
    ) -> Result<bool> {
        sqlx::query_scalar(&schema.render(q::SLOT_CONFIRMED_TO))
            .bind(lsn)
            .fetch_one(conn)
            .await
            .map_err(Error::db("reading the slot's confirmed position"))
    }

    /// Seconds the oldest claimable event has waited, 0 when none: one the
    /// relay could claim now (live, its retry due, its type not paused, its
    /// aggregate not held back by an earlier event in backoff), counted
    /// from when it became claimable. What waits on purpose (a backoff, a
    /// pause) is not late. `/metrics`, `outbox status` and the console all
    /// read this one definition.
    pub async fn oldest_claimable_age(conn: &mut PgConnection, schema: &Schema) -> Result<f64> {
        sqlx::query_scalar(&schema.render(q::OLDEST_CLAIMABLE_AGE))
            .fetch_one(conn)
            .await
            .map_err(Error::db("reading the oldest claimable event's age"))
    }

    /// Seconds since the oldest snapshot still held in this database was
    /// taken (prepared transactions included, autovacuum left out), 0 when
    /// none: what keeps vacuum from removing the outbox's deleted rows.
    pub async fn oldest_snapshot_age(conn: &mut PgConnection) -> Result<f64> {
        sqlx::query_scalar(q::OLDEST_SNAPSHOT_AGE)
            .fetch_one(conn)
            .await
            .map_err(Error::db("reading the oldest snapshot's age"))
    }

    /// Live events left to deliver (pending, not dead-lettered).
    pub async fn pending(conn: &mut PgConnection, schema: &Schema) -> Result<i64> {
        sqlx::query_scalar(&schema.render(q::PENDING_COUNT))
            .fetch_one(conn)
            .await
            .map_err(Error::db("counting pending events"))
    }
}
