//! The relay's statements keep to their indexes whatever the table's size
//! when PostgreSQL planned them: a plan made while the outbox was a page,
//! kept while deleted rows grow it to hundreds, must not read the whole
//! heap at every claim.

use outbox::test_seam::ClaimLoop;
use outbox::Schema;
use outbox_testkit::postgres::migrated_test_db;
use sqlx::postgres::PgPoolOptions;
use sqlx::{Executor, PgPool};

/// Sequential scans of the outbox table counted so far, as seen from the
/// store's own session (which reports its counts first).
async fn seq_scans(pool: &PgPool) -> i64 {
    let mut conn = pool.acquire().await.unwrap();
    sqlx::query("SELECT pg_stat_force_next_flush()")
        .execute(&mut *conn)
        .await
        .unwrap();
    // A statement of its own, so the flush above has happened; a fresh
    // snapshot of the counters.
    sqlx::query("SELECT pg_stat_clear_snapshot()")
        .execute(&mut *conn)
        .await
        .unwrap();
    sqlx::query_scalar(
        "SELECT seq_scan FROM pg_stat_user_tables WHERE relid = 'outbox_events'::regclass",
    )
    .fetch_one(&mut *conn)
    .await
    .unwrap()
}

#[tokio::test]
async fn a_claim_planned_on_a_tiny_table_never_scans_the_heap_once_it_has_grown() {
    let (db, setup) = migrated_test_db().await;
    // One session, planning every statement once (the generic plan, as a
    // relay's prepared statements get after their first executions).
    let pool = PgPoolOptions::new()
        .max_connections(1)
        .after_connect(|conn, _| {
            Box::pin(async move {
                conn.execute("SET plan_cache_mode = force_generic_plan")
                    .await
                    .map(|_| ())
            })
        })
        .connect(&db.url)
        .await
        .unwrap();
    sqlx::raw_sql(
        "ALTER TABLE outbox_events SET (autovacuum_enabled = false);
         INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload)
         SELECT 'order', g::text, 'order.created', '{}' FROM generate_series(1, 20) g",
    )
    .execute(&setup)
    .await
    .unwrap();
    let mut claims = ClaimLoop::new(pool.clone(), &Schema::default())
        .await
        .unwrap();
    // Planned now, on a one-page table.
    assert_eq!(claims.claim(100).await.unwrap(), 20);
    claims.next_retry().await.unwrap();

    // The table grows to hundreds of pages of deleted rows (vacuum has not
    // run: it is off here, as it is behind a held snapshot).
    sqlx::raw_sql(
        "INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload)
         SELECT 'order', g::text, 'order.created', jsonb_build_object('n', g, 'pad', repeat('x', 200))
         FROM generate_series(1, 20000) g;
         DELETE FROM outbox_events WHERE payload ? 'pad';",
    )
    .execute(&setup)
    .await
    .unwrap();
    let pages: i64 = sqlx::query_scalar("SELECT pg_relation_size('outbox_events') / 8192")
        .fetch_one(&setup)
        .await
        .unwrap();
    assert!(
        pages > 100,
        "the table should have grown, it has {pages} pages"
    );

    // A busy relay: each claim acknowledges the last batch and finds a few
    // new rows. The first one after the growth sees the table's size.
    let mut before = 0;
    for round in 0..11 {
        if round == 1 {
            before = seq_scans(&pool).await;
        }
        sqlx::query(
            "INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload)
             SELECT 'order', g::text, 'order.created', '{}' FROM generate_series(1, 5) g",
        )
        .execute(&setup)
        .await
        .unwrap();
        assert_eq!(claims.claim(100).await.unwrap(), 5, "round {round}");
        claims.next_retry().await.unwrap();
    }
    let scans = seq_scans(&pool).await - before;
    assert_eq!(
        scans, 0,
        "claims and retry lookups planned on a one-page table read the whole {pages}-page heap {scans} times in 10 rounds"
    );
}
