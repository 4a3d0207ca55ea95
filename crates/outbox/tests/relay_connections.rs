//! What a relay takes from its pool: asleep, no connection but its
//! listener's, so a relay sharing the service's pool does not keep
//! connections from the service's own queries.

mod common;

use std::time::Duration;

use common::{event, fast_config, setup};
use outbox::Relay;
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
