//! The overview's figures on an outbox too large to count: bounded counts
//! with PostgreSQL's estimate past the bound, and the delivery rate from
//! kept rows (retention mode) or from the table's deleted rows (the
//! default), each read by `outbox console` from a real PostgreSQL.

mod common;
mod console_support;

use std::time::{Duration, Instant};

use console_support::{client, get, start};
use outbox_testkit::postgres::migrated_test_db;

async fn figures(c: &reqwest::Client, console: &console_support::Console) -> serde_json::Value {
    let (status, json) = get(c, console, "/overview.json").await;
    assert_eq!(status, 200, "{json}");
    serde_json::from_str(&json).unwrap()
}

#[tokio::test]
async fn counts_past_ten_thousand_show_the_estimate_not_a_full_count() {
    let (db, pool) = migrated_test_db().await;
    sqlx::raw_sql(
        "INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload,
                                    dead_lettered_at, last_error)
         SELECT 'order', 'a' || i, 'order.created', '{}', now(), 'no'
         FROM generate_series(1, 12000) i;
         INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload)
         SELECT 'order', 'a' || i, 'order.created', '{}' FROM generate_series(1, 25000) i;
         INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload)
         VALUES ('order', 'x', 'order.created', '{}');",
    )
    .execute(&pool)
    .await
    .unwrap();
    sqlx::raw_sql("VACUUM ANALYZE outbox_events")
        .execute(&pool)
        .await
        .unwrap();
    let console = start(&db.url, &[], &[]);
    let c = client();
    let f = figures(&c, &console).await;
    // The estimate is the index's entry count at the vacuum: rounded to two
    // significant figures.
    assert_eq!(f["pending"], "~25,000", "{f}");
    assert_eq!(f["dead_letters"], "~12,000", "{f}");
    assert_eq!(f["retrying"], "0", "{f}");
    // Past the bound and never measured (no vacuum since): only the bound.
    sqlx::raw_sql(
        "INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload,
                                    next_attempt_at, attempts)
         SELECT 'order', 'r' || i, 'order.created', '{}', now() + interval '1 hour', 1
         FROM generate_series(1, 10001) i;",
    )
    .execute(&pool)
    .await
    .unwrap();
    let f = figures(&c, &console).await;
    assert!(
        f["retrying"] == "10,000+" || f["retrying"].as_str().unwrap().starts_with('~'),
        "{f}"
    );
    // Exact below the bound, with thousands separated.
    sqlx::raw_sql("DELETE FROM outbox_events WHERE dead_lettered_at IS NOT NULL AND seq % 3 <> 0")
        .execute(&pool)
        .await
        .unwrap();
    let f = figures(&c, &console).await;
    assert_eq!(f["dead_letters"], "4,000", "{f}");
}

#[tokio::test]
async fn the_delivery_rate_comes_from_kept_rows_in_retention_mode() {
    let (db, pool) = migrated_test_db().await;
    let console = start(&db.url, &[], &[]);
    let c = client();
    // Nothing delivered yet, nothing deleted: no rate to give.
    let f = figures(&c, &console).await;
    assert!(f["delivered"].as_str().unwrap().starts_with('-'), "{f}");
    // 300 rows delivered in the last minute, 500 before it.
    sqlx::raw_sql(
        "INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload, processed_at)
         SELECT 'order', 'a' || i, 'order.created', '{}',
                now() - CASE WHEN i <= 300 THEN interval '30 s' ELSE interval '5 min' END
         FROM generate_series(1, 800) i",
    )
    .execute(&pool)
    .await
    .unwrap();
    let f = figures(&c, &console).await;
    assert_eq!(f["delivered"], "5.0/s (60 s, kept rows)", "{f}");
}

#[tokio::test]
async fn the_delivery_rate_comes_from_deleted_rows_in_the_default_mode() {
    let (db, pool) = migrated_test_db().await;
    sqlx::raw_sql(
        "INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload)
         SELECT 'order', 'a' || i, 'order.created', '{}' FROM generate_series(1, 600) i",
    )
    .execute(&pool)
    .await
    .unwrap();
    let console = start(&db.url, &[], &[]);
    let c = client();
    figures(&c, &console).await;
    // Delivered as the relay does by default: deleted on acknowledgement.
    let mut conn = pool.acquire().await.unwrap();
    sqlx::raw_sql("DELETE FROM outbox_events")
        .execute(&mut *conn)
        .await
        .unwrap();
    // PostgreSQL publishes a backend's counts at its next idle moment
    // after this (at most about a second later).
    sqlx::raw_sql("SELECT pg_stat_force_next_flush()")
        .execute(&mut *conn)
        .await
        .unwrap();
    drop(conn);
    let deadline = Instant::now() + Duration::from_secs(30);
    let shown = loop {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let f = figures(&c, &console).await;
        let shown = f["delivered"].as_str().unwrap().to_owned();
        if shown.contains("deletions") && !shown.starts_with("0.0/s") {
            break shown;
        }
        assert!(Instant::now() < deadline, "no deletion rate: {f}");
    };
    // 600 rows over the few seconds since the console's first sample.
    let per_sec: f64 = shown.split("/s").next().unwrap().parse().unwrap();
    let over: f64 = shown
        .split('(')
        .nth(1)
        .unwrap()
        .split(" s")
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        (per_sec * over - 600.0).abs() < 600.0 * 0.1 + 1.0,
        "{shown}"
    );
}

/// The overview says how events travel: the table mode, or the WAL mode
/// with its slot (read or not, how far behind).
#[tokio::test]
async fn the_overview_names_the_delivery_mode_and_the_wal_modes_slot() {
    let (db, _pool) = migrated_test_db().await;
    let console = start(&db.url, &[], &[]);
    let c = client();
    assert_eq!(figures(&c, &console).await["delivery"], "table");
    drop(console);

    let cluster = tokio::task::spawn_blocking(|| outbox_testkit::postgres::logical_cluster(&[]))
        .await
        .unwrap();
    let out = common::run(&["migrate", "--mode", "wal"], Some(&cluster.url()));
    assert!(out.status.success(), "{}", common::text(&out.stderr));
    let console = start(&cluster.url(), &[], &[]);
    let shown = figures(&c, &console).await["delivery"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        shown.starts_with("wal — slot outbox_public") && shown.contains("NOT READ"),
        "{shown}"
    );
}
