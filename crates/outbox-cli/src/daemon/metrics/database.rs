//! The gauges only the database knows, read every `http.refresh_ms` by one
//! loop (never by a scrape; [`crate::daemon::db_probe::refresh_loop`]): the status
//! counters, how long the oldest *claimable* event has waited, and how old
//! the oldest snapshot holding back vacuum is.

use outbox::{Schema, Status};
use sqlx::PgConnection;

/// Pauses in force (migration 10; the console writes them), for
/// `outbox_paused`. `{schema}` is the outbox schema.
pub const PAUSE_COUNT: &str = "SELECT count(*) FROM {schema}.outbox_pauses";

/// What one refresh read.
#[derive(Debug, Clone, PartialEq)]
pub struct DbGauges {
    /// The status counters.
    pub status: Status,
    /// [`Status::oldest_claimable_age`]: the one definition `outbox
    /// status` and the console read too.
    pub oldest_claimable_age_seconds: f64,
    /// [`Status::oldest_snapshot_age`].
    pub oldest_xmin_age_seconds: f64,
    /// [`PAUSE_COUNT`].
    pub paused: i64,
}

impl DbGauges {
    /// Reads every database gauge on `conn`.
    pub async fn read(conn: &mut PgConnection, schema: &Schema) -> Result<DbGauges, String> {
        let status = Status::read(conn, schema)
            .await
            .map_err(|e| format!("{e:#}"))?;
        let oldest_claimable_age_seconds = status.oldest_claimable_age_seconds;
        let oldest_xmin_age_seconds = status.oldest_snapshot_age_seconds;
        let paused: i64 = sqlx::query_scalar(&PAUSE_COUNT.replace("{schema}", schema.name()))
            .fetch_one(&mut *conn)
            .await
            .map_err(|e| format!("reading the pauses: {e}"))?;
        Ok(DbGauges {
            status,
            oldest_claimable_age_seconds,
            oldest_xmin_age_seconds,
            paused,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sqlx::Connection;
    use sqlx::PgPool;
    use std::time::Duration;

    async fn gauges(pool: &PgPool) -> DbGauges {
        let mut conn = pool.acquire().await.unwrap();
        DbGauges::read(&mut conn, &Schema::default()).await.unwrap()
    }

    /// Inserts a pending event of `agg`, created `age_s` seconds ago, next
    /// attempt `next_s` seconds from now (none when `None`).
    async fn insert(pool: &PgPool, agg: &str, age_s: i64, next_s: Option<i64>) {
        sqlx::query(
            "INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload,
                                        created_at, next_attempt_at, attempts)
             VALUES ('order', $1, 'order.created', '{}', now() - $2 * interval '1 second',
                     now() + $3 * interval '1 second', CASE WHEN $3 IS NULL THEN 0 ELSE 1 END)",
        )
        .bind(agg)
        .bind(age_s)
        .bind(next_s)
        .execute(pool)
        .await
        .unwrap();
    }

    fn near(got: f64, want: f64) -> bool {
        (got - want).abs() < 5.0
    }

    #[tokio::test]
    async fn the_claimable_age_leaves_out_events_waiting_out_a_backoff() {
        let (_db, pool) = outbox_testkit::postgres::migrated_test_db().await;
        assert_eq!(gauges(&pool).await.oldest_claimable_age_seconds, 0.0);
        // Backing off for an hour, and an event queued behind it: both
        // older than anything claimable, neither counted.
        insert(&pool, "held", 900, Some(3600)).await;
        insert(&pool, "held", 800, None).await;
        insert(&pool, "fresh", 60, None).await;
        // Failed once 10 minutes ago; its retry came due 10 s ago.
        insert(&pool, "due", 600, Some(-10)).await;
        let g = gauges(&pool).await;
        assert!(near(g.oldest_claimable_age_seconds, 60.0), "{g:?}");
        assert!(near(g.status.oldest_pending_age_seconds.unwrap(), 900.0));
        sqlx::query("DELETE FROM outbox_events WHERE aggregate_id = 'fresh'")
            .execute(&pool)
            .await
            .unwrap();
        let g = gauges(&pool).await;
        assert!(near(g.oldest_claimable_age_seconds, 10.0), "{g:?}");
        sqlx::query("DELETE FROM outbox_events WHERE aggregate_id = 'due'")
            .execute(&pool)
            .await
            .unwrap();
        assert_eq!(gauges(&pool).await.oldest_claimable_age_seconds, 0.0);
    }

    #[tokio::test]
    async fn the_xmin_age_is_that_of_the_oldest_open_snapshot() {
        let (db, pool) = outbox_testkit::postgres::migrated_test_db().await;
        let idle = gauges(&pool).await.oldest_xmin_age_seconds;
        assert!(idle < 1.0, "nothing holds a snapshot: {idle}");
        let mut holder = sqlx::PgConnection::connect(&db.url).await.unwrap();
        sqlx::query("BEGIN ISOLATION LEVEL REPEATABLE READ")
            .execute(&mut holder)
            .await
            .unwrap();
        sqlx::query("SELECT count(*) FROM outbox_events")
            .execute(&mut holder)
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let held = gauges(&pool).await.oldest_xmin_age_seconds;
        assert!(held >= 1.5, "a snapshot held 1.5 s: {held}");
        sqlx::query("COMMIT").execute(&mut holder).await.unwrap();
        let after = gauges(&pool).await.oldest_xmin_age_seconds;
        assert!(after < 1.0, "released: {after}");
    }
}
