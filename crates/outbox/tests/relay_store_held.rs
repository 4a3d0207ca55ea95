//! The connection a busy relay's claims keep between them
//! (`relay/store/held.rs`): it serves the next call and only that one, and
//! never one the pool has no other for.

use std::time::Duration;

use outbox_testkit::postgres::migrated_test_db;
use sqlx::pool::PoolConnection;
use sqlx::postgres::PgPoolOptions;
use sqlx::{PgPool, Postgres};

use outbox::test_seam::Held;

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
