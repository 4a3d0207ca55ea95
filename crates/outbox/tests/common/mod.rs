//! Shared setup: a fresh, migrated database per test and a fast relay.
#![allow(dead_code)]

pub mod logical;

use std::time::Duration;

use outbox::{NewEvent, Outbox, Relay, RelayConfig, RelayHandle};
use outbox_testkit::postgres::{migrated_test_db, TestDb};
use outbox_testkit::TestPublisher;
use sqlx::PgPool;

pub struct Ctx {
    pub db: TestDb,
    pub pool: PgPool,
    pub outbox: Outbox,
}

pub async fn setup() -> Ctx {
    let (db, pool) = migrated_test_db().await;
    Ctx {
        db,
        pool,
        outbox: Outbox::new(),
    }
}

/// Settings that make a test relay quick: short polls, leases and backoffs.
pub fn fast_config(instance: &str) -> RelayConfig {
    RelayConfig {
        instance_id: Some(instance.to_owned()),
        batch_size: 100,
        poll_min_ms: 2,
        poll_max_ms: 50,
        lease_ms: 1_500,
        backoff_base_ms: 20,
        backoff_max_ms: 200,
        outage_backoff_max_ms: 100,
        ..RelayConfig::default()
    }
}

pub async fn start_relay(ctx: &Ctx, publisher: &TestPublisher, config: RelayConfig) -> RelayHandle {
    Relay::builder(ctx.pool.clone(), publisher.clone())
        .config(config)
        .wakeup(ctx.outbox.wakeup())
        .spawn()
        .await
        .unwrap()
}

/// Event `n` (1-based) of aggregate `agg`, with its position in the payload.
pub fn event(agg: &str, n: i64) -> NewEvent {
    NewEvent::json("order", agg, "order.updated", serde_json::json!({ "n": n }))
}

/// Position of a delivered event within its aggregate.
pub fn position(e: &outbox::Event) -> i64 {
    let v: serde_json::Value = serde_json::from_str(&e.payload).unwrap();
    v["n"].as_i64().unwrap()
}

/// Panics unless the first deliveries of every aggregate came in enqueue
/// order ([`position`]); redeliveries are ignored.
pub fn assert_first_deliveries_in_order(deliveries: &[outbox::Event]) {
    let order = deliveries
        .iter()
        .map(|e| (e.aggregate_id.as_str(), position(e)));
    if let Some(v) = outbox_testkit::first_delivery_violation(order) {
        panic!("order broken: {v}");
    }
}

/// Runs `sql` (no parameters) on `conn`, which must succeed.
pub async fn execute<'e>(conn: impl sqlx::PgExecutor<'e>, sql: &str) {
    sqlx::query(sql)
        .execute(conn)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
}

pub async fn count(pool: &PgPool, sql: &str) -> i64 {
    sqlx::query_scalar(sql).fetch_one(pool).await.unwrap()
}

pub const LONG: Duration = Duration::from_secs(60);

/// Every row of the outbox: with the default retention (rows deleted on
/// acknowledgement), the pending events and the dead letters.
pub const EVENTS: &str = "SELECT count(*) FROM outbox_events";

/// The rows not dead-lettered: with the default retention, the events not
/// yet delivered.
pub const NOT_DEAD: &str = "SELECT count(*) FROM outbox_events WHERE dead_lettered_at IS NULL";

/// Waits up to [`LONG`] for `what`: the count `sql` selects to be `n`.
pub async fn wait_for_count(pool: &PgPool, what: &str, sql: &str, n: i64) {
    outbox_testkit::wait_until(what, LONG, || async { count(pool, sql).await == n }).await;
}

/// Every row `sql` (no parameters) selects from `pool`, which must succeed.
pub async fn rows<T>(pool: &PgPool, sql: &str) -> Vec<T>
where
    T: for<'r> sqlx::FromRow<'r, sqlx::postgres::PgRow> + Send + Unpin,
{
    sqlx::query_as(sql)
        .fetch_all(pool)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
}

/// Producers write `per_agg` events to each of `aggs` aggregates, one
/// transaction per event, serialised per aggregate (as the contract asks)
/// but interleaved across aggregates; each producer wakes the relay after
/// every round of its aggregates (with one aggregate each: after every
/// commit).
pub async fn produce(
    pool: sqlx::PgPool,
    outbox: outbox::Outbox,
    aggs: usize,
    per_agg: i64,
    producers: usize,
) {
    let mut tasks = Vec::new();
    for p in 0..producers {
        let (pool, outbox) = (pool.clone(), outbox.clone());
        tasks.push(tokio::spawn(async move {
            for n in 1..=per_agg {
                for a in (p..aggs).step_by(producers) {
                    let mut tx = pool.begin().await.unwrap();
                    outbox
                        .enqueue(&mut *tx, &event(&format!("agg-{a}"), n))
                        .await
                        .unwrap();
                    tx.commit().await.unwrap();
                }
                outbox.wake();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
}
