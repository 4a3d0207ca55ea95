//! What a producer's INSERT is checked against, after migration 9 moved the
//! checks into cheaper places: every timestamp and the headers are still
//! refused when unreadable, and the upgrade rewrites nothing.

mod common;

use outbox::Schema;

/// Inserts one event with `column` set to `value` (SQL text); the error's
/// text if PostgreSQL refused it.
async fn insert_with(pool: &sqlx::PgPool, column: &str, value: &str) -> Option<String> {
    sqlx::query(&format!(
        "INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload, {column})
         VALUES ('order', 'w1', 'order.created', '{{}}', {value})"
    ))
    .execute(pool)
    .await
    .err()
    .map(|e| e.to_string())
}

#[tokio::test]
async fn every_timestamp_and_the_headers_are_still_checked_at_insert() {
    let ctx = common::setup().await;
    for column in [
        "created_at",
        "processed_at",
        "next_attempt_at",
        "dead_lettered_at",
    ] {
        for value in ["'infinity'", "'-infinity'", "'294276-12-31 00:00:00+00'"] {
            let refused = insert_with(&ctx.pool, column, value)
                .await
                .unwrap_or_else(|| panic!("{column} = {value} was accepted"));
            assert!(
                refused.contains("outbox_events_finite_times")
                    || refused.contains("outbox_events_finite_marks"),
                "{column} = {value}: the refusal names the check: {refused}"
            );
        }
        assert_eq!(
            insert_with(&ctx.pool, column, "now()").await,
            None,
            "{column} = now() is readable"
        );
    }
    for value in ["'[]'", "'1'", "'\"text\"'", "'null'"] {
        let refused = insert_with(&ctx.pool, "headers", value)
            .await
            .unwrap_or_else(|| panic!("headers = {value} was accepted"));
        assert!(
            refused.contains("outbox_events_headers_object"),
            "{refused}"
        );
    }
    // The checks hold for changes too, not only for inserts.
    let changed = sqlx::query("UPDATE outbox_events SET processed_at = 'infinity'")
        .execute(&ctx.pool)
        .await
        .expect_err("an unreadable processed_at set by an UPDATE")
        .to_string();
    assert!(changed.contains("outbox_events_finite_marks"), "{changed}");
}

/// The table's and its indexes' files, by name: a rewrite or an index
/// build gives them new ones.
async fn files(pool: &sqlx::PgPool) -> Vec<(String, i64)> {
    sqlx::query_as(
        "SELECT relname::text, relfilenode::bigint FROM pg_class
         WHERE relnamespace = 'public'::regnamespace
           AND (relname = 'outbox_events' OR relname LIKE 'idx_outbox_%'
                OR relname = 'outbox_events_pkey')
         ORDER BY relname",
    )
    .fetch_all(pool)
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn migration_9_rewrites_no_table_and_builds_no_index() {
    let ctx = common::setup().await;
    // The table as migration 8 left it, holding pending, retrying,
    // processed and dead rows.
    sqlx::raw_sql(
        "BEGIN;
         DROP VIEW outbox_dead_letters;
         ALTER TABLE outbox_events
             ALTER COLUMN created_at TYPE timestamptz,
             ALTER COLUMN headers TYPE jsonb,
             DROP CONSTRAINT outbox_events_finite_marks;
         DROP DOMAIN outbox_time;
         DROP DOMAIN outbox_headers;
         CREATE VIEW outbox_dead_letters AS
             SELECT * FROM outbox_events
             WHERE dead_lettered_at IS NOT NULL AND processed_at IS NULL ORDER BY seq;
         DELETE FROM outbox_schema_migrations WHERE version = 9;
         INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload,
                                    processed_at, next_attempt_at, dead_lettered_at)
         SELECT 'order', 'm' || g % 50, 'order.updated', jsonb_build_object('n', g),
                CASE WHEN g % 4 = 1 THEN now() END,
                CASE WHEN g % 4 = 2 THEN now() + interval '1 hour' END,
                CASE WHEN g % 4 = 3 THEN now() END
         FROM generate_series(1, 2000) AS g;
         COMMIT;",
    )
    .execute(&ctx.pool)
    .await
    .expect("the schema before migration 9");
    let before = files(&ctx.pool).await;
    // The table, its key and four indexes (migration 12's dead-letter
    // index stays: migration 9 does not touch it).
    assert_eq!(before.len(), 6, "{before:?}");

    let mut conn = ctx.pool.acquire().await.unwrap();
    let report = outbox::migrate(&mut conn, &Schema::default(), &Default::default())
        .await
        .expect("migration 9");
    drop(conn);
    assert_eq!(report.applied, ["0009_cheaper_inserts"]);
    assert_eq!(
        files(&ctx.pool).await,
        before,
        "the table or an index was rewritten"
    );
    assert_eq!(
        common::count(&ctx.pool, common::EVENTS).await,
        2000,
        "every row kept"
    );
    assert_eq!(
        common::count(&ctx.pool, "SELECT count(*) FROM outbox_dead_letters").await,
        500
    );
}
