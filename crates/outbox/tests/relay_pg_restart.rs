//! PostgreSQL killed (SIGKILL) and restarted under a running relay: nothing
//! committed is lost, first deliveries stay in order, and the relay resumes
//! by itself.

mod common;

use std::collections::HashSet;
use std::time::Duration;

use common::{event, fast_config};
use outbox::{Outbox, Relay};
use outbox_testkit::postgres::{PgCluster, PgOptions};
use outbox_testkit::{wait_until, TestPublisher};
use sqlx::postgres::PgPoolOptions;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_relay_survives_a_postgres_crash_and_restart() {
    // synchronous_commit on: a commit acknowledged to the producer survives
    // the server's SIGKILL.
    let mut cluster = tokio::task::spawn_blocking(|| {
        PgCluster::start_with(PgOptions {
            extra_conf: vec![("synchronous_commit".into(), "on".into())],
            ..PgOptions::default()
        })
    })
    .await
    .unwrap()
    .unwrap();
    let pool = PgPoolOptions::new()
        .max_connections(8)
        .acquire_timeout(Duration::from_secs(2))
        .connect(&cluster.url())
        .await
        .unwrap();
    let mut conn = pool.acquire().await.unwrap();
    outbox::migrate(&mut conn, &Default::default(), &Default::default())
        .await
        .unwrap();
    drop(conn);

    let outbox = Outbox::new();
    let publisher = TestPublisher::new();
    publisher.set_latency(Duration::from_millis(2));
    let relay = Relay::builder(pool.clone(), publisher.clone())
        .config(fast_config("survivor"))
        .wakeup(outbox.wakeup())
        .spawn()
        .await
        .unwrap();

    // Rounds of one event per aggregate; only the rounds whose commit
    // returned count as committed.
    let mut committed = HashSet::new();
    let mut round = 0;
    let mut crashed = false;
    while round < 60 {
        round += 1;
        let events: Vec<_> = (0..50).map(|a| event(&format!("agg-{a}"), round)).collect();
        match outbox.enqueue_many(&pool, &events).await {
            Ok(ids) => committed.extend(ids),
            Err(e) => {
                // The server is down: this round may or may not have
                // committed; retry it as a new round later.
                assert!(e.is_retriable(), "{e}");
                round -= 1;
            }
        }
        outbox.wake();
        if round == 20 && !crashed {
            crashed = true;
            let delivered_before = publisher.delivered_count();
            cluster.kill();
            let mut c = cluster;
            cluster = tokio::task::spawn_blocking(move || {
                c.restart().unwrap();
                c
            })
            .await
            .unwrap();
            assert!(delivered_before < 60 * 50, "the crash lands mid-run");
        }
    }

    wait_until(
        "every committed event delivered after the restart",
        Duration::from_secs(60),
        || async {
            let got: HashSet<_> = publisher.deliveries().iter().map(|e| e.id).collect();
            committed.iter().all(|id| got.contains(id))
        },
    )
    .await;
    // The relay either saw statements fail (an outage) or the pool
    // reconnected under it; either way it must still be running.
    assert!(!relay.is_finished());
    relay.shutdown().await.unwrap();
    common::assert_first_deliveries_in_order(&publisher.deliveries());
}
