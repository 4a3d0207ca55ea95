//! The connection the claims run on while the relay has work.
//!
//! Taking a connection from the pool costs a round trip (the pool checks it
//! before handing it out) and moves the claim from one session to another,
//! each with its own plan cache. While claims keep returning events the
//! store keeps the last claim's connection here and runs its next call on
//! it. Three rules keep that from taking a connection anyone else needs:
//!
//! - every call of the store takes the held connection, if there is one,
//!   before it asks the pool for another, so the store never waits on the
//!   pool while it holds one idle;
//! - a connection is held only after a claim that returned events; a claim
//!   that returned none, and any error, give it back to the pool (so an
//!   idle relay holds none, and a connection a server restart broke is
//!   checked by the pool before it is used again);
//! - it is not held when the pool has no idle connection left and is at
//!   its size limit: someone may be waiting for one.
//!
//! And the worker gives it back ([`super::Store::connection_release`])
//! before every wait but its pace (idle, outage, parked) and once
//! publishing a batch has taken longer than the longest pace, so a relay
//! waiting on a broker or for work holds no connection idle.

use std::sync::{Arc, Mutex};

use sqlx::pool::PoolConnection;
use sqlx::{PgPool, Postgres};

/// A slot for at most one connection of `pool`, shared by the store's
/// clones.
#[derive(Debug, Clone)]
pub(super) struct Held {
    pool: PgPool,
    slot: Arc<Mutex<Option<PoolConnection<Postgres>>>>,
}

impl Held {
    pub(super) fn new(pool: PgPool) -> Self {
        Held {
            pool,
            slot: Arc::new(Mutex::new(None)),
        }
    }

    /// The held connection if there is one, else one from the pool.
    pub(super) async fn connection(&self) -> Result<PoolConnection<Postgres>, sqlx::Error> {
        match self.take() {
            Some(conn) => Ok(conn),
            None => self.pool.acquire().await,
        }
    }

    /// Keeps `conn` for the next call, unless the pool may need it.
    pub(super) fn keep(&self, conn: PoolConnection<Postgres>) {
        let full = self.pool.size() >= self.pool.options().get_max_connections();
        if full && self.pool.num_idle() == 0 {
            return;
        }
        // One kept at a time: a connection kept before is given back.
        let before = self.slot.lock().expect("held slot").replace(conn);
        drop(before);
    }

    /// Gives the held connection back to the pool.
    pub(super) fn release(&self) {
        drop(self.take());
    }

    fn take(&self) -> Option<PoolConnection<Postgres>> {
        self.slot.lock().expect("held slot").take()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use outbox_testkit::postgres::migrated_test_db;
    use sqlx::pool::PoolConnection;
    use sqlx::postgres::PgPoolOptions;
    use sqlx::{PgPool, Postgres};

    use super::Held;

    async fn pid(conn: &mut PoolConnection<Postgres>) -> i32 {
        sqlx::query_scalar("SELECT pg_backend_pid()")
            .fetch_one(&mut **conn)
            .await
            .unwrap()
    }

    async fn pool(url: &str, size: u32) -> PgPool {
        PgPoolOptions::new()
            .max_connections(size)
            .acquire_timeout(Duration::from_secs(3))
            .connect(url)
            .await
            .unwrap()
    }

    #[tokio::test]
    async fn a_kept_connection_serves_the_next_call_and_only_that_one() {
        let (db, _setup) = migrated_test_db().await;
        let pool = pool(&db.url, 3).await;
        let held = Held::new(pool.clone());
        // Two other sessions idle in the pool, given back before the one
        // kept: the pool would hand out one of them next.
        let others = (pool.acquire().await.unwrap(), pool.acquire().await.unwrap());
        let mut first = held.connection().await.unwrap();
        drop(others);
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(pool.num_idle(), 2);
        let kept = pid(&mut first).await;
        held.keep(first);
        let mut next = held.connection().await.unwrap();
        assert_eq!(
            pid(&mut next).await,
            kept,
            "the next call runs on the kept connection"
        );
        // Taken: a call beside it gets another session.
        let mut beside = held.connection().await.unwrap();
        assert_ne!(pid(&mut beside).await, kept);
    }

    #[tokio::test]
    async fn no_connection_is_kept_that_the_pool_has_no_other_for() {
        let (db, _setup) = migrated_test_db().await;
        let pool = pool(&db.url, 1).await;
        let held = Held::new(pool.clone());
        let conn = held.connection().await.unwrap();
        held.keep(conn);
        let other = pool.acquire().await;
        assert!(
            other.is_ok(),
            "the pool's only connection was kept from it: {:?}",
            other.err()
        );
    }

    #[tokio::test]
    async fn a_released_connection_goes_back_to_the_pool() {
        let (db, _setup) = migrated_test_db().await;
        let pool = pool(&db.url, 2).await;
        let held = Held::new(pool.clone());
        let conn = held.connection().await.unwrap();
        held.keep(conn);
        held.release();
        let both = (pool.acquire().await, pool.acquire().await);
        assert!(
            both.0.is_ok() && both.1.is_ok(),
            "a released connection stayed held"
        );
    }
}
