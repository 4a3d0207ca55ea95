//! Rows no client can decode, written by plain SQL before the table refused
//! them: each is dead-lettered alone with the reason, its aggregate moves
//! on, and the relay, the status report and the dead-letter tools keep
//! working.

mod common;

use common::{fast_config, start_relay, wait_for_count, LONG, NOT_DEAD};
use outbox::{
    Cleanup, CleanupParams, CleanupTarget, DeadLetterFilter, DeadLetters, Schema, Status,
};
use outbox_testkit::{wait_until, TestPublisher};
use sqlx::PgPool;

/// Timestamps PostgreSQL stores but no client library can represent.
const UNREADABLE_TIMES: &[&str] = &["infinity", "-infinity", "294276-12-31 00:00:00+00"];

/// Writes rows as they could be written before migration 2: the checks
/// (a table constraint, and since migrations 9 and 11 domains' too) are
/// dropped for the insert and put back unvalidated by migrations 2, 9 and
/// 11 themselves, so the constraints are exactly the shipped ones.
async fn insert_legacy(pool: &PgPool, sql: &str) {
    let mut tx = pool.begin().await.unwrap();
    sqlx::raw_sql(DROP_TIME_CHECKS)
        .execute(&mut *tx)
        .await
        .unwrap();
    sqlx::raw_sql(sql).execute(&mut *tx).await.unwrap();
    common::execute(
        &mut *tx,
        "DELETE FROM outbox_schema_migrations WHERE version IN (2, 9, 11)",
    )
    .await;
    tx.commit().await.unwrap();
    let mut conn = pool.acquire().await.unwrap();
    let report = outbox::migrate(&mut conn, &Schema::default(), &Default::default())
        .await
        .unwrap();
    assert_eq!(
        report.applied,
        vec![
            "0002_finite_timestamps".to_owned(),
            "0009_cheaper_inserts".to_owned(),
            "0011_partition_function_and_row_checks".to_owned()
        ]
    );
}

/// Every check of the timestamps' range, as migrations 2, 9 and 11 left
/// them (the table's cast to `outbox_row` carries the marks' check).
const DROP_TIME_CHECKS: &str = "
ALTER DOMAIN outbox_time DROP CONSTRAINT outbox_events_finite_times;
ALTER TABLE outbox_events DROP CONSTRAINT outbox_events_row";

#[tokio::test]
async fn an_undecodable_row_is_dead_lettered_alone_and_its_aggregate_moves_on() {
    let ctx = common::setup().await;
    let mut sql = String::new();
    for (i, at) in UNREADABLE_TIMES.iter().enumerate() {
        // each bad row has a successor in its aggregate, and a healthy
        // neighbour aggregate
        sql.push_str(&format!(
            "INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload, created_at)
             VALUES ('order', 'bad-{i}', 'order.created', '{{\"n\": 1}}', '{at}');
             INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload)
             VALUES ('order', 'bad-{i}', 'order.updated', '{{\"n\": 2}}'),
                    ('order', 'ok-{i}', 'order.created', '{{\"n\": 1}}');"
        ));
    }
    insert_legacy(&ctx.pool, &sql).await;

    let publisher = TestPublisher::new();
    let relay = start_relay(&ctx, &publisher, fast_config("r1")).await;
    wait_until("every decodable event to be delivered", LONG, || async {
        publisher.deliveries().len() >= 2 * UNREADABLE_TIMES.len()
    })
    .await;
    wait_for_count(
        &ctx.pool,
        "the relay to be idle with nothing pending",
        NOT_DEAD,
        0,
    )
    .await;
    assert!(!relay.is_finished(), "the relay must keep running");
    relay.shutdown().await.unwrap();

    let delivered = publisher.deliveries();
    for i in 0..UNREADABLE_TIMES.len() {
        let of = |agg: String| {
            delivered
                .iter()
                .filter(|e| e.aggregate_id == agg)
                .map(|e| e.event_type.clone())
                .collect::<Vec<_>>()
        };
        assert_eq!(
            of(format!("bad-{i}")),
            vec!["order.updated".to_owned()],
            "the bad row is never published; its successor is"
        );
        assert_eq!(of(format!("ok-{i}")), vec!["order.created".to_owned()]);
    }
    let dead: Vec<(String, i32, String)> = sqlx::query_as(
        "SELECT aggregate_id, attempts, last_error FROM outbox_events
         WHERE dead_lettered_at IS NOT NULL ORDER BY aggregate_id",
    )
    .fetch_all(&ctx.pool)
    .await
    .unwrap();
    assert_eq!(dead.len(), UNREADABLE_TIMES.len(), "{dead:?}");
    for ((agg, attempts, error), (i, at)) in dead.iter().zip(UNREADABLE_TIMES.iter().enumerate()) {
        assert_eq!(agg, &format!("bad-{i}"));
        assert_eq!(*attempts, 1, "dead-lettered at once");
        let shown = at.split(' ').next().unwrap();
        assert!(
            error.contains("undecodable row")
                && error.contains("created_at")
                && error.contains(shown),
            "the reason names the column and the value: {error}"
        );
    }

    // The operator's tools read the same rows.
    let mut conn = ctx.pool.acquire().await.unwrap();
    let schema = Schema::default();
    let status = Status::read(&mut conn, &schema).await.unwrap();
    assert_eq!(status.dead_letters, UNREADABLE_TIMES.len() as i64);
    let page = DeadLetters::new(&schema)
        .list(&mut conn, &DeadLetterFilter::default())
        .await
        .unwrap();
    assert_eq!(page.items.len(), UNREADABLE_TIMES.len());
    assert!(page.items.iter().all(|d| d.created_at.is_none()));
}

#[tokio::test]
async fn operator_commands_read_rows_with_unreadable_times() {
    let ctx = common::setup().await;
    let mut sql = String::new();
    for at in UNREADABLE_TIMES {
        sql.push_str(&format!(
            "INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload, created_at)
             VALUES ('order', 'pending', 'order.created', '{{}}', '{at}');
             INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload,
                                        attempts, last_error, dead_lettered_at)
             VALUES ('order', 'dead', 'order.created', '{{\"n\": 1e400}}', 3, 'boom', '{at}');
             INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload, processed_at)
             VALUES ('order', 'done', 'order.created', '{{}}', '{at}');"
        ));
    }
    insert_legacy(&ctx.pool, &sql).await;
    let mut conn = ctx.pool.acquire().await.unwrap();
    let schema = Schema::default();

    let status = Status::read(&mut conn, &schema).await.unwrap();
    assert_eq!(status.pending, 3);
    assert_eq!(status.dead_letters, 3);

    let dead = DeadLetters::new(&schema);
    let page = dead
        .list(&mut conn, &DeadLetterFilter::default())
        .await
        .unwrap();
    assert_eq!(page.items.len(), 3);
    for d in &page.items {
        assert_eq!(d.dead_lettered_at, None);
        assert_eq!(
            d.payload.get(),
            format!("{{\"n\": 1{}}}", "0".repeat(400)),
            "the payload as PostgreSQL prints it"
        );
    }
    let json = serde_json::to_string(&page.items[0]).unwrap();
    assert!(json.contains(r#""dead_lettered_at":null"#), "{json}");

    // Processed rows of every such time: the cleaner removes what is old
    // enough (`-infinity`) and keeps the rest, without failing.
    let removed = Cleanup::new(&schema, CleanupTarget::Events)
        .run(
            &ctx.pool,
            &CleanupParams {
                older_than: std::time::Duration::from_secs(60),
                batch_size: 2,
            },
        )
        .await
        .unwrap();
    assert_eq!(
        removed, 1,
        "only the processed row of -infinity is old enough"
    );

    // New rows with such times are refused at insert.
    for at in UNREADABLE_TIMES {
        let refused = sqlx::query(&format!(
            "INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload, created_at)
             VALUES ('order', 'new', 'order.created', '{{}}', '{at}')"
        ))
        .execute(&ctx.pool)
        .await
        .unwrap_err()
        .to_string();
        assert!(refused.contains("outbox_events_finite_times"), "{refused}");
    }
}
