//! The claim cursor: while something holds an old snapshot, claims do not
//! walk the rows deleted since again and again; transactions that commit
//! late with a low seq are never skipped, across a crash and a rebalance.

mod common;

use std::collections::HashMap;
use std::time::Duration;

use common::{count, fast_config, start_relay, wait_for_count, EVENTS};
use outbox::{RelayConfig, Retention};
use outbox_testkit::{wait_until, TestPublisher};
use rand::Rng;
use sqlx::PgPool;
use uuid::Uuid;

/// Index entries of the unprocessed-rows index read so far (what a claim
/// walks, dead entries included).
async fn index_entries_read(pool: &PgPool) -> i64 {
    common::count(pool, "SELECT idx_tup_read FROM pg_stat_user_indexes WHERE indexrelname = 'idx_outbox_unprocessed'").await
}

/// `n` events by plain SQL, 20 per transaction, paced so the relay keeps up
/// (each claim then finds a few new rows, as in production).
async fn produce(pool: &PgPool, n: usize) {
    for chunk in 0..n / 20 {
        sqlx::query(
            "INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload)
             SELECT 'order', (g % 500)::text, 'order.created', '{}' FROM generate_series(1, 20) g",
        )
        .execute(pool)
        .await
        .unwrap();
        if chunk % 10 == 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}

async fn drained(pool: &PgPool) {
    wait_for_count(
        pool,
        "the relay to drain",
        "SELECT count(*) FROM outbox_events WHERE processed_at IS NULL",
        0,
    )
    .await;
    // Let the relay's backends report their statistics (at most once a
    // second in PostgreSQL 15).
    tokio::time::sleep(Duration::from_millis(2_500)).await;
}

/// [`produce`] `n` events, then waits until they are [`drained`].
async fn produce_and_drain(pool: &PgPool, n: usize) {
    produce(pool, n).await;
    drained(pool).await;
}

/// Index entries read per event for 2,000 events with 2,000 held dead rows
/// behind them, then with 22,000; the second must stay within 3× the first
/// (or 40 per event).
/// With `analyze`, statistics are gathered after the 20,000 (as autovacuum
/// does while the snapshot is held), so the relay's statements are planned
/// again from statistics in which almost no row is pending. With
/// `writer_elsewhere`, a transaction that took an id stays open for the
/// whole test in another database of the same server.
async fn dead_rows_are_not_walked_again(
    instance: &str,
    retention: Retention,
    analyze: bool,
    writer_elsewhere: bool,
) {
    let ctx = common::setup().await;
    let publisher = TestPublisher::new();
    let config = RelayConfig {
        retention,
        ..fast_config(instance)
    };
    let relay = start_relay(&ctx, &publisher, config).await;

    let elsewhere = match writer_elsewhere {
        true => {
            let other = outbox_testkit::postgres::test_db().await.pool().await;
            let mut writer = other.acquire().await.unwrap();
            sqlx::raw_sql("BEGIN; SELECT pg_current_xact_id();")
                .execute(&mut *writer)
                .await
                .unwrap();
            Some((other, writer))
        }
        false => None,
    };

    // An old snapshot, held for the whole test: nothing deleted from now on
    // can be vacuumed.
    let mut holder = ctx.pool.acquire().await.unwrap();
    sqlx::raw_sql("BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT count(*) FROM pg_class;")
        .execute(&mut *holder)
        .await
        .unwrap();

    let before = index_entries_read(&ctx.pool).await;
    produce_and_drain(&ctx.pool, 2_000).await;
    let early = index_entries_read(&ctx.pool).await;
    // Ten times as many dead rows...
    produce_and_drain(&ctx.pool, 20_000).await;
    if analyze {
        common::execute(&ctx.pool, "ANALYZE outbox_events").await;
    }
    let middle = index_entries_read(&ctx.pool).await;
    // ...then the same 2,000 events again.
    produce_and_drain(&ctx.pool, 2_000).await;
    let late = index_entries_read(&ctx.pool).await;

    let (first, last) = ((early - before) as f64, (late - middle) as f64);
    eprintln!(
        "index entries read per event ({retention:?}, analyze {analyze}): {:.1} with 2,000 dead rows, {:.1} with 22,000",
        first / 2_000.0,
        last / 2_000.0
    );
    // Walking the held dead rows again reads over a thousand entries per
    // event here; a correct claim reads about ten, more on a busy machine
    // where claims find fewer events each (hence the floor of 40).
    assert!(
        last <= (3.0 * first).max(40.0 * 2_000.0),
        "claims must not walk the held dead rows again: {first} entries read for the first 2,000 events, {last} for the last 2,000"
    );
    sqlx::raw_sql("COMMIT").execute(&mut *holder).await.unwrap();
    if let Some((_, mut writer)) = elsewhere {
        sqlx::raw_sql("COMMIT").execute(&mut *writer).await.unwrap();
    }
    relay.shutdown().await.unwrap();
}

/// Defines test `$name`: [`dead_rows_are_not_walked_again`] with `$args`.
macro_rules! dead_rows_case {
    ($(#[$doc:meta])* $name:ident: $($args:expr),+) => {
        $(#[$doc])*
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $name() {
            dead_rows_are_not_walked_again($($args),+).await;
        }
    };
}

dead_rows_case!(claims_do_not_walk_the_dead_rows_of_a_held_snapshot_again:
    "held", Retention::Delete, false, false);
dead_rows_case!(claims_do_not_walk_held_dead_rows_after_statistics_say_nothing_is_pending:
    "held-analyzed", Retention::Delete, true, false);
dead_rows_case!(retention_claims_do_not_walk_processed_rows_after_statistics_say_nothing_is_pending:
    "held-kept", Retention::Keep, true, false);
dead_rows_case!(
    /// A transaction open in another database cannot write to this outbox, so
    /// it must not hold the claim cursor back (it did: the late-commit test's
    /// writers, in their own database, made this test's claims walk the dead
    /// rows again when the two ran side by side).
    a_writer_open_in_another_database_does_not_hold_the_claims_back:
    "held-elsewhere", Retention::Delete, false, true);

/// Rows read by sequential scans of the outbox table so far.
async fn table_rows_scanned(pool: &PgPool) -> i64 {
    common::count(
        pool,
        "SELECT seq_tup_read FROM pg_stat_user_tables WHERE relname = 'outbox_events'",
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_claims_stay_cheap_while_a_new_table_grows() {
    // A relay started beside an empty outbox plans its claim for a table
    // of a few pages; in retention mode the table then grows with every
    // event, long before autovacuum first analyzes it. Claims planned for
    // the empty table would read the whole table every time.
    let ctx = common::setup().await;
    let publisher = TestPublisher::new();
    let config = RelayConfig {
        retention: Retention::Keep,
        ..fast_config("growing")
    };
    let relay = start_relay(&ctx, &publisher, config).await;
    let before = table_rows_scanned(&ctx.pool).await;
    for _ in 0..6 {
        produce(&ctx.pool, 4_000).await;
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    drained(&ctx.pool).await;
    let scanned = table_rows_scanned(&ctx.pool).await - before;
    eprintln!(
        "rows read by sequential scans per event: {:.1}",
        scanned as f64 / 24_000.0
    );
    // Planned for the empty table, claims read several hundred rows per
    // event here; planned again as the table grows, a few.
    assert!(
        scanned <= 100 * 24_000,
        "claims must not keep reading the whole table: {scanned} rows scanned for 24,000 events"
    );
    relay.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn late_commits_are_delivered_in_order_across_a_crash_and_a_rebalance() {
    let ctx = common::setup().await;
    let publisher = TestPublisher::new();
    let config = |id: &str| RelayConfig {
        batch_size: 20,
        ..fast_config(id)
    };
    let first = start_relay(&ctx, &publisher, config("r1")).await;

    // One writer per aggregate (serialised, as producers must be); some of
    // its transactions stay open for up to 2 s while others commit, so rows
    // with low seqs become visible after rows with higher ones.
    const AGGREGATES: usize = 30;
    const PER_AGGREGATE: i64 = 8;
    let mut writers = Vec::new();
    for a in 0..AGGREGATES {
        let pool = ctx.pool.clone();
        writers.push(tokio::spawn(async move {
            let mut ids = Vec::new();
            for n in 1..=PER_AGGREGATE {
                let hold = {
                    let mut rng = rand::rng();
                    if rng.random_bool(0.3) {
                        rng.random_range(0..2_000)
                    } else {
                        rng.random_range(0..20)
                    }
                };
                let mut tx = pool.begin().await.unwrap();
                let id: Uuid = sqlx::query_scalar(
                    "INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload)
                     VALUES ('order', $1, 'order.updated', jsonb_build_object('n', $2::bigint))
                     RETURNING id",
                )
                .bind(format!("late-{a}"))
                .bind(n)
                .fetch_one(&mut *tx)
                .await
                .unwrap();
                tokio::time::sleep(Duration::from_millis(hold)).await;
                tx.commit().await.unwrap();
                ids.push(id);
            }
            ids
        }));
    }

    // A crash, then two instances sharing the partitions.
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    first.abort();
    let second = start_relay(&ctx, &publisher, config("r2")).await;
    tokio::time::sleep(Duration::from_millis(2_000)).await;
    let third = start_relay(&ctx, &publisher, config("r3")).await;

    let mut expected = Vec::new();
    for w in writers {
        expected.extend(w.await.unwrap());
    }
    // Well within the cursor's periodic full rescan (30 s): a late commit
    // the cursor had passed would only be found by that.
    wait_until(
        "every late commit to be delivered",
        Duration::from_secs(15),
        || async { count(&ctx.pool, EVENTS).await == 0 },
    )
    .await;
    second.shutdown().await.unwrap();
    third.shutdown().await.unwrap();

    let delivered = publisher.deliveries();
    let seen: HashMap<Uuid, ()> = delivered.iter().map(|e| (e.id, ())).collect();
    let lost: Vec<_> = expected
        .iter()
        .filter(|id| !seen.contains_key(id))
        .collect();
    assert!(
        lost.is_empty(),
        "{} late commits lost: {lost:?}",
        lost.len()
    );
    common::assert_first_deliveries_in_order(&delivered);
}
