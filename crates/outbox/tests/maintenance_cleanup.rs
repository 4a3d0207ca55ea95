//! Retention cleanup: exactly the expired processed events and inbox marks
//! go, in batches; pending, dead-lettered and recent rows stay.

mod common;

use std::time::Duration;

use common::{count, wait_for_count, EVENTS, LONG};
use outbox::{Cleaner, CleanerConfig, Cleanup, CleanupParams, CleanupTarget, Schema};
use outbox_testkit::wait_until;
use sqlx::PgPool;

const DAY: Duration = Duration::from_secs(86_400);

/// Inserts `n` events of aggregate `agg` in `schema`; `processed_ago` and
/// `dead_ago` are intervals such as `'8 days'` (NULL leaves them unset).
async fn insert(
    pool: &PgPool,
    schema: &str,
    agg: &str,
    n: i64,
    (processed_ago, dead_ago): (Option<&str>, Option<&str>),
) {
    sqlx::query(&format!(
        "INSERT INTO {schema}.outbox_events
             (aggregate_type, aggregate_id, event_type, payload, created_at, processed_at,
              dead_lettered_at)
         SELECT 'order', $1, 'order.updated', jsonb_build_object('n', i),
                now() - interval '30 days', now() - $2::interval, now() - $3::interval
         FROM generate_series(1, $4::bigint) AS i"
    ))
    .bind(agg)
    .bind(processed_ago)
    .bind(dead_ago)
    .bind(n)
    .execute(pool)
    .await
    .unwrap();
}

/// Rows left per aggregate id, sorted.
async fn left(pool: &PgPool, schema: &str) -> Vec<(String, i64)> {
    let sql = format!(
        "SELECT aggregate_id, count(*) FROM {schema}.outbox_events
         GROUP BY aggregate_id ORDER BY aggregate_id"
    );
    common::rows(pool, &sql).await
}

/// The mix every cleanup test starts from: 25 expired processed rows, and
/// rows that must survive a 7-day cleanup.
async fn mixed_rows(pool: &PgPool, schema: &str) {
    insert(pool, schema, "expired", 25, (Some("8 days"), None)).await;
    insert(pool, schema, "recent", 3, (Some("6 days"), None)).await;
    insert(pool, schema, "pending", 2, (None, None)).await;
    insert(pool, schema, "dead", 2, (None, Some("20 days"))).await;
}

fn survivors() -> Vec<(String, i64)> {
    vec![
        ("dead".into(), 2),
        ("pending".into(), 2),
        ("recent".into(), 3),
    ]
}

#[tokio::test]
async fn cleanup_deletes_exactly_the_expired_processed_events_in_batches() {
    let db = outbox_testkit::postgres::test_db().await;
    let pool = db.pool().await;
    // A schema other than public: every statement must carry it.
    let schema = Schema::new("shop").unwrap();
    outbox::migrate(
        &mut pool.acquire().await.unwrap(),
        &schema,
        &Default::default(),
    )
    .await
    .unwrap();
    mixed_rows(&pool, "shop").await;

    let cleanup = Cleanup::new(&schema, CleanupTarget::Events);
    let mut conn = pool.acquire().await.unwrap();
    let cutoff = cleanup.cutoff(&mut conn, 7 * DAY).await.unwrap();
    assert_eq!(cleanup.count(&mut conn, cutoff).await.unwrap(), 25);
    let mut batches = Vec::new();
    loop {
        let n = cleanup.delete_batch(&mut conn, cutoff, 10).await.unwrap();
        batches.push(n);
        if n < 10 {
            break;
        }
    }
    assert_eq!(
        batches,
        [10, 10, 5],
        "at most batch_size rows per statement"
    );
    assert_eq!(left(&pool, "shop").await, survivors());

    // The one-call form, on a fresh set of expired rows.
    insert(&pool, "shop", "expired", 7, (Some("8 days"), None)).await;
    let params = CleanupParams {
        older_than: 7 * DAY,
        batch_size: 3,
    };
    assert_eq!(
        Cleanup::new(&schema, CleanupTarget::Events)
            .run(&pool, &params)
            .await
            .unwrap(),
        7
    );
    assert_eq!(left(&pool, "shop").await, survivors());
    assert_eq!(
        Cleanup::new(&schema, CleanupTarget::Events)
            .run(&pool, &params)
            .await
            .unwrap(),
        0,
        "nothing left to delete"
    );
    let zero = CleanupParams {
        batch_size: 0,
        ..params
    };
    let err = Cleanup::new(&schema, CleanupTarget::Events)
        .run(&pool, &zero)
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("batch_size") && err.contains('0'), "{err}");
}

#[tokio::test]
async fn concurrent_cleanups_share_the_rows_without_double_counting() {
    let ctx = common::setup().await;
    insert(
        &ctx.pool,
        "public",
        "expired",
        2_000,
        (Some("2 days"), None),
    )
    .await;
    insert(&ctx.pool, "public", "recent", 5, (Some("1 hour"), None)).await;
    let params = CleanupParams {
        older_than: DAY,
        batch_size: 50,
    };
    let schema = Schema::default();
    let cleanup = Cleanup::new(&schema, CleanupTarget::Events);
    let (a, b) = tokio::join!(
        cleanup.run(&ctx.pool, &params),
        cleanup.run(&ctx.pool, &params)
    );
    assert_eq!(a.unwrap() + b.unwrap(), 2_000);
    assert_eq!(left(&ctx.pool, "public").await, [("recent".into(), 5)]);
}

async fn insert_marks(pool: &PgPool, consumer: &str, n: i64, ago: &str) {
    sqlx::query(
        "INSERT INTO processed_events (consumer, event_id, processed_at)
         SELECT $1, gen_random_uuid(), now() - $2::interval FROM generate_series(1, $3::bigint)",
    )
    .bind(consumer)
    .bind(ago)
    .bind(n)
    .execute(pool)
    .await
    .unwrap();
}

async fn marks(pool: &PgPool) -> Vec<(String, i64)> {
    let sql = "SELECT consumer, count(*) FROM processed_events GROUP BY consumer ORDER BY consumer";
    common::rows(pool, sql).await
}

#[tokio::test]
async fn inbox_cleanup_deletes_only_marks_older_than_the_period() {
    let ctx = common::setup().await;
    insert_marks(&ctx.pool, "billing", 12, "31 days").await;
    insert_marks(&ctx.pool, "billing", 4, "29 days").await;
    insert_marks(&ctx.pool, "shipping", 5, "40 days").await;
    insert_marks(&ctx.pool, "shipping", 1, "1 minute").await;
    // Outbox rows are not the inbox's business.
    mixed_rows(&ctx.pool, "public").await;

    let params = CleanupParams {
        older_than: 30 * DAY,
        batch_size: 5,
    };
    let deleted = Cleanup::new(&Schema::default(), CleanupTarget::Inbox)
        .run(&ctx.pool, &params)
        .await
        .unwrap();
    assert_eq!(deleted, 17);
    assert_eq!(
        marks(&ctx.pool).await,
        [("billing".into(), 4), ("shipping".into(), 1)]
    );
    assert_eq!(count(&ctx.pool, EVENTS).await, 32);
}

#[tokio::test]
async fn the_cleaner_task_deletes_expired_rows_and_stops_on_shutdown() {
    let ctx = common::setup().await;
    mixed_rows(&ctx.pool, "public").await;
    insert_marks(&ctx.pool, "billing", 6, "3 days").await;
    insert_marks(&ctx.pool, "billing", 2, "1 hour").await;

    let bad = CleanerConfig {
        interval_secs: 0,
        ..CleanerConfig::default()
    };
    let err = Cleaner::spawn(ctx.pool.clone(), Schema::default(), bad).unwrap_err();
    assert!(err.to_string().contains("interval_secs"), "{err}");

    let config = CleanerConfig {
        events_retention_secs: 7 * 86_400,
        inbox_retention_secs: Some(2 * 86_400),
        interval_secs: 3_600,
        batch_size: 4,
    };
    let cleaner = Cleaner::spawn(ctx.pool.clone(), Schema::default(), config).unwrap();
    // The first run starts at once; wait for it to complete.
    wait_until("the first cleanup run", LONG, || async {
        cleaner.stats().runs >= 1
    })
    .await;
    let stats = cleaner.shutdown().await.unwrap();
    assert_eq!(
        (
            stats.runs,
            stats.failed_runs,
            stats.events_deleted,
            stats.inbox_deleted
        ),
        (1, 0, 25, 6)
    );
    assert_eq!(left(&ctx.pool, "public").await, survivors());
    assert_eq!(marks(&ctx.pool).await, [("billing".into(), 2)]);
}

#[tokio::test]
async fn without_an_inbox_retention_the_cleaner_leaves_the_inbox_alone() {
    let ctx = common::setup().await;
    insert_marks(&ctx.pool, "billing", 3, "400 days").await;
    insert(&ctx.pool, "public", "expired", 2, (Some("8 days"), None)).await;
    let cleaner = Cleaner::spawn(
        ctx.pool.clone(),
        Schema::default(),
        CleanerConfig::default(),
    )
    .unwrap();
    wait_until("the first cleanup run", LONG, || async {
        cleaner.stats().runs >= 1
    })
    .await;
    let stats = cleaner.shutdown().await.unwrap();
    assert_eq!((stats.events_deleted, stats.inbox_deleted), (2, 0));
    assert_eq!(marks(&ctx.pool).await, [("billing".into(), 3)]);
}

#[tokio::test]
async fn rows_kept_by_a_relay_in_retention_mode_are_cleaned_up() {
    let ctx = common::setup().await;
    let publisher = outbox_testkit::TestPublisher::new();
    let events: Vec<_> = (1..=10).map(|n| common::event("a", n)).collect();
    publisher.fail(
        outbox_testkit::Match::Id(events[4].id),
        outbox_testkit::Fail::Reject,
        None,
    );
    ctx.outbox.enqueue_many(&ctx.pool, &events).await.unwrap();
    let config = outbox::RelayConfig {
        retention: outbox::Retention::Keep,
        ..common::fast_config("r1")
    };
    let relay = common::start_relay(&ctx, &publisher, config).await;
    wait_for_count(&ctx.pool, "every event processed or dead-lettered", "SELECT count(*) FROM outbox_events WHERE processed_at IS NULL AND dead_lettered_at IS NULL", 0).await;
    relay.shutdown().await.unwrap();
    let processed = "SELECT count(*) FROM outbox_events WHERE processed_at IS NOT NULL";
    assert_eq!(count(&ctx.pool, processed).await, 9);

    let schema = Schema::default();
    let day = CleanupParams::older_than(DAY);
    assert_eq!(
        Cleanup::new(&schema, CleanupTarget::Events)
            .run(&ctx.pool, &day)
            .await
            .unwrap(),
        0
    );
    let now = CleanupParams::older_than(Duration::ZERO);
    assert_eq!(
        Cleanup::new(&schema, CleanupTarget::Events)
            .run(&ctx.pool, &now)
            .await
            .unwrap(),
        9
    );
    let left: Vec<uuid::Uuid> = sqlx::query_scalar("SELECT id FROM outbox_events")
        .fetch_all(&ctx.pool)
        .await
        .unwrap();
    assert_eq!(left, [events[4].id], "the dead letter stays");
}
