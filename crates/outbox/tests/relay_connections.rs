//! What a relay takes from its pool: asleep, no connection but its
//! listener's, so a relay sharing the service's pool does not keep
//! connections from the service's own queries.

mod common;

use std::time::Duration;

use common::{event, fast_config, setup};
use outbox::{Relay, RelayConfig};
use outbox_testkit::{wait_until, TestPublisher};
use sqlx::postgres::PgPoolOptions;

#[tokio::test]
async fn an_idle_relay_gives_its_claims_connection_back_to_the_pool() {
    let ctx = setup().await;
    const SIZE: u32 = 4;
    let pool = PgPoolOptions::new()
        .max_connections(SIZE)
        .acquire_timeout(Duration::from_secs(10))
        .connect(&ctx.db.url)
        .await
        .unwrap();
    let publisher = TestPublisher::new();
    let relay = Relay::builder(pool.clone(), publisher.clone())
        .config(fast_config("pool-relay"))
        .wakeup(ctx.outbox.wakeup())
        .spawn()
        .await
        .unwrap();
    let events: Vec<_> = (1..=50).map(|n| event("a", n)).collect();
    ctx.outbox.enqueue_many(&ctx.pool, &events).await.unwrap();
    ctx.outbox.wake();
    wait_until("every event delivered", Duration::from_secs(30), || async {
        publisher.delivered_count() >= events.len()
    })
    .await;

    // Asleep now (its linger is 25 ms): every connection but the
    // listener's can be taken, within the pool's timeout (the lease round
    // and an idle poll hold one for a moment at most).
    let mut taken = Vec::new();
    for n in 1..SIZE {
        match pool.acquire().await {
            Ok(conn) => taken.push(conn),
            Err(e) => {
                let sessions: Vec<(Option<String>, Option<String>)> = sqlx::query_as(
                    "SELECT state, left(query, 80) FROM pg_stat_activity
                     WHERE datname = current_database() AND pid <> pg_backend_pid()",
                )
                .fetch_all(&ctx.pool)
                .await
                .unwrap();
                panic!(
                    "only {} of {} connections could be taken beside an idle relay (one is its listener's): {e}; sessions (state, last statement): {sessions:?}",
                    n - 1,
                    SIZE - 1
                )
            }
        }
    }
    drop(taken);

    // And it still works after that.
    ctx.outbox
        .enqueue_many(&ctx.pool, &[event("a", 51)])
        .await
        .unwrap();
    ctx.outbox.wake();
    wait_until(
        "the next event delivered",
        Duration::from_secs(30),
        || async { publisher.delivered_count() > events.len() },
    )
    .await;
    relay.shutdown().await.unwrap();
}

/// A pool of [`SIZE`] whose callers wait at most 1 s for a connection:
/// less than the relay's waits below, so a connection the relay kept
/// through one of them makes [`take_all_but_the_listeners`] fail.
async fn impatient_pool(url: &str) -> sqlx::PgPool {
    PgPoolOptions::new()
        .max_connections(SIZE)
        .acquire_timeout(Duration::from_secs(1))
        .connect(url)
        .await
        .unwrap()
}

const SIZE: u32 = 4;

/// Settings whose lease round (which would take a kept connection back
/// by using it) runs only every 10 s.
fn slow_lease_config(instance: &str) -> RelayConfig {
    RelayConfig {
        lease_ms: 30_000,
        ..fast_config(instance)
    }
}

/// Takes every connection of `pool` but the relay's listener's, within the
/// pool's timeout; panics naming `while_what` if one cannot be had.
async fn take_all_but_the_listeners(pool: &sqlx::PgPool, while_what: &str) {
    let mut taken = Vec::new();
    for n in 1..SIZE {
        match pool.acquire().await {
            Ok(conn) => taken.push(conn),
            Err(e) => panic!(
                "only {} of {} connections could be taken beside a relay {while_what} (one is its listener's): {e}",
                n - 1,
                SIZE - 1
            ),
        }
    }
}

#[tokio::test]
async fn a_relay_waiting_out_a_broker_outage_holds_no_connection_but_its_listeners() {
    let ctx = setup().await;
    let pool = impatient_pool(&ctx.db.url).await;
    let publisher = TestPublisher::new();
    publisher.set_down(true);
    let config = RelayConfig {
        poll_min_ms: 2_000,
        poll_max_ms: 2_000,
        outage_backoff_max_ms: 8_000,
        ..slow_lease_config("outage-relay")
    };
    let relay = Relay::builder(pool.clone(), publisher.clone())
        .config(config)
        .wakeup(ctx.outbox.wakeup())
        .spawn()
        .await
        .unwrap();
    let events: Vec<_> = (1..=5).map(|n| event("a", n)).collect();
    ctx.outbox.enqueue_many(&ctx.pool, &events).await.unwrap();
    ctx.outbox.wake();
    // Its second failed call: the worker now waits 4 s before the next.
    wait_until(
        "two failed publish calls",
        Duration::from_secs(30),
        || async { publisher.unavailable_calls() >= 2 },
    )
    .await;
    take_all_but_the_listeners(&pool, "waiting out an outage").await;

    publisher.set_down(false);
    wait_until("every event delivered", Duration::from_secs(30), || async {
        publisher.delivered_count() >= events.len()
    })
    .await;
    relay.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_relay_publishing_to_a_slow_broker_holds_no_connection_but_its_listeners() {
    let ctx = setup().await;
    let pool = impatient_pool(&ctx.db.url).await;
    let publisher = TestPublisher::new();
    publisher.set_latency(Duration::from_secs(3));
    let relay = Relay::builder(pool.clone(), publisher.clone())
        .config(slow_lease_config("slow-broker-relay"))
        .wakeup(ctx.outbox.wakeup())
        .spawn()
        .await
        .unwrap();
    // One aggregate each: one publish call for all of them.
    let events: Vec<_> = (1..=5).map(|n| event(&format!("a{n}"), 1)).collect();
    ctx.outbox.enqueue_many(&ctx.pool, &events).await.unwrap();
    ctx.outbox.wake();
    wait_until(
        "a publish call under way",
        Duration::from_secs(30),
        || async { publisher.calls() >= 1 },
    )
    .await;
    take_all_but_the_listeners(&pool, "publishing to a slow broker").await;

    wait_until("every event delivered", Duration::from_secs(30), || async {
        publisher.delivered_count() >= events.len()
    })
    .await;
    relay.shutdown().await.unwrap();
}
