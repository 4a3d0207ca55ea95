//! The state of an outbox at a glance (`outbox status`).

use serde::Serialize;
use sqlx::{PgConnection, Row};

use crate::error::{Error, Result};
use crate::queries as q;
use crate::schema::Schema;

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
        Ok(Status {
            schema: schema.name().to_owned(),
            pending: row.get(0),
            retrying: row.get(1),
            dead_letters: row.get(2),
            oldest_pending_age_seconds: row.get(3),
            partitions,
        })
    }

    /// Live events left to deliver (pending, not dead-lettered).
    pub async fn pending(conn: &mut PgConnection, schema: &Schema) -> Result<i64> {
        sqlx::query_scalar(&schema.render(q::PENDING_COUNT))
            .fetch_one(conn)
            .await
            .map_err(Error::db("counting pending events"))
    }
}
