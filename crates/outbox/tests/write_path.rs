//! What a producer's INSERT is checked against, after migrations 9 and 11
//! moved the checks into cheaper places: every timestamp and the headers
//! are still refused when unreadable, and the upgrades rewrite nothing.

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
async fn migrations_9_and_11_rewrite_no_table_and_build_no_index() {
    let ctx = common::setup().await;
    // The table as migration 8 left it (but for the `partition` column),
    // holding pending, retrying, processed and dead rows.
    sqlx::raw_sql(
        "BEGIN;
         DROP VIEW outbox_dead_letters;
         ALTER TABLE outbox_events DROP CONSTRAINT outbox_events_row;
         DROP DOMAIN outbox_row;
         ALTER TABLE outbox_events
             ALTER COLUMN created_at TYPE timestamptz,
             ALTER COLUMN headers TYPE jsonb,
             ADD CONSTRAINT outbox_events_seq_positive CHECK (seq > 0) NOT VALID;
         DROP DOMAIN outbox_time;
         DROP DOMAIN outbox_headers;
         CREATE VIEW outbox_dead_letters AS
             SELECT * FROM outbox_events
             WHERE dead_lettered_at IS NOT NULL AND processed_at IS NULL ORDER BY seq;
         DELETE FROM outbox_schema_migrations WHERE version IN (9, 11);
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
        .expect("migrations 9 and 11");
    drop(conn);
    assert_eq!(
        report.applied,
        [
            "0009_cheaper_inserts",
            "0011_partition_function_and_row_checks"
        ]
    );
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

/// The schema as migration 10 left it (the `partition` column stored, the
/// checks on the table): migrations 1-10 applied from their files, as
/// `migrate` applied them, and recorded.
async fn schema_before_migration_11(pool: &sqlx::PgPool) {
    let files = [
        include_str!("../migrations/0001_outbox.sql"),
        include_str!("../migrations/0002_finite_timestamps.sql"),
        include_str!("../migrations/0003_idle_wakeup.sql"),
        include_str!("../migrations/0004_xid_first.sql"),
        include_str!("../migrations/0005_retry_index.sql"),
        include_str!("../migrations/0006_one_wakeup_trigger.sql"),
        include_str!("../migrations/0007_idle_flag_in_a_sequence.sql"),
        include_str!("../migrations/0008_seq_always_positive.sql"),
        include_str!("../migrations/0009_cheaper_inserts.sql"),
        include_str!("../migrations/0010_pause.sql"),
    ];
    let mut sql = String::from(
        "BEGIN;
         CREATE TABLE public.outbox_schema_migrations (
             version    INT PRIMARY KEY,
             name       TEXT NOT NULL,
             applied_at TIMESTAMPTZ NOT NULL DEFAULT NOW());",
    );
    for (i, file) in files.iter().enumerate() {
        sql.push_str(
            &file
                .replace("{schema}", "public")
                .replace("{partitions}", "32")
                .replace("{channel}", &Schema::default().channel()),
        );
        sql.push_str(&format!(
            ";\nINSERT INTO outbox_schema_migrations (version, name) VALUES ({}, 'm');\n",
            i + 1
        ));
    }
    sql.push_str("COMMIT;");
    sqlx::raw_sql(&sql)
        .execute(pool)
        .await
        .expect("the schema as migration 10 left it");
}

/// Migration 11 on a live outbox: pending events, events waiting out a
/// backoff and dead letters are all kept, each row's partition is the
/// number its column held, and a relay then delivers every pending and
/// retrying event once, each aggregate's in order, leaving the dead
/// letters where they were.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn migration_11_keeps_pending_retrying_and_dead_events_and_their_order() {
    let db = outbox_testkit::postgres::test_db().await;
    let ctx = common::Ctx {
        pool: db.pool().await,
        db,
        outbox: outbox::Outbox::new(),
    };
    schema_before_migration_11(&ctx.pool).await;
    // 30 aggregates × 6 events; the first event of every third aggregate
    // failed once and waits out a short backoff (holding its aggregate
    // back), and 5 other aggregates hold a dead letter each.
    for n in 1..=6_i64 {
        sqlx::query(
            "INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload)
             SELECT 'order', 'agg-' || a, 'order.updated', jsonb_build_object('n', $1::bigint)
             FROM generate_series(0, 29) AS a",
        )
        .bind(n)
        .execute(&ctx.pool)
        .await
        .unwrap();
    }
    common::execute(
        &ctx.pool,
        "UPDATE outbox_events SET attempts = 1, last_error = 'broker busy',
                next_attempt_at = now() + interval '300 milliseconds'
         WHERE payload->>'n' = '1' AND (substr(aggregate_id, 5))::int % 3 = 0",
    )
    .await;
    common::execute(
        &ctx.pool,
        "INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload,
                                    attempts, last_error, dead_lettered_at)
         SELECT 'order', 'dead-' || d, 'order.updated', '{\"n\": 1}', 5, 'broker said no', now()
         FROM generate_series(1, 5) AS d",
    )
    .await;
    let before: Vec<(uuid::Uuid, i64, i32)> = common::rows(
        &ctx.pool,
        "SELECT id, seq, partition FROM outbox_events ORDER BY seq",
    )
    .await;
    assert_eq!(before.len(), 185);

    let mut conn = ctx.pool.acquire().await.unwrap();
    let report = outbox::migrate(&mut conn, &Schema::default(), &Default::default())
        .await
        .expect("migration 11 over a live outbox");
    drop(conn);
    assert_eq!(
        report.applied,
        [
            "0011_partition_function_and_row_checks",
            "0012_dead_letter_index",
            "0013_emit",
            "0014_wal_switch_mark",
            "0015_pauses_notify",
            "0016_channel_names_fit",
            "0017_pauses_in_the_stream"
        ]
    );
    assert_eq!(report.wakeup, outbox::WakeupTrigger::Idle);
    let after: Vec<(uuid::Uuid, i64, i32)> = common::rows(
        &ctx.pool,
        "SELECT id, seq, outbox_partition(aggregate_id) FROM outbox_events ORDER BY seq",
    )
    .await;
    assert_eq!(
        after, before,
        "every row kept, in its seq, in its partition"
    );
    assert_eq!(
        common::count(
            &ctx.pool,
            "SELECT count(*) FROM outbox_events WHERE next_attempt_at IS NOT NULL"
        )
        .await,
        10,
        "the backoffs kept"
    );
    assert_eq!(
        common::count(
            &ctx.pool,
            "SELECT count(*) FROM outbox_dead_letters WHERE partition = outbox_partition(aggregate_id)"
        )
        .await,
        5,
        "the dead letters, with their partition in the view"
    );

    let publisher = outbox_testkit::TestPublisher::new();
    let relay = common::start_relay(&ctx, &publisher, common::fast_config("upgraded")).await;
    common::wait_for_count(
        &ctx.pool,
        "the pending and retrying events delivered",
        common::NOT_DEAD,
        0,
    )
    .await;
    relay.shutdown().await.unwrap();
    let delivered = publisher.deliveries();
    assert_eq!(delivered.len(), 180, "each pending or retrying event once");
    common::assert_first_deliveries_in_order(&delivered);
    assert_eq!(
        common::count(&ctx.pool, "SELECT count(*) FROM outbox_dead_letters").await,
        5,
        "the dead letters stay dead letters"
    );
}

/// A relay, `status` or the console started before `outbox migrate` has
/// applied migration 11 is told to migrate, not left to fail at its first
/// claim.
#[tokio::test]
async fn a_schema_without_migration_11_is_reported_as_not_migrated() {
    let db = outbox_testkit::postgres::test_db().await;
    let pool = db.pool().await;
    schema_before_migration_11(&pool).await;
    let mut conn = pool.acquire().await.unwrap();
    let err = outbox::ensure_migrated(&mut conn, &Schema::default())
        .await
        .expect_err("migration 11 is missing")
        .to_string();
    assert!(
        err.contains("function outbox_partition(text) is missing")
            && err.contains("outbox migrate"),
        "{err}"
    );
    outbox::migrate(&mut conn, &Schema::default(), &Default::default())
        .await
        .unwrap();
    outbox::ensure_migrated(&mut conn, &Schema::default())
        .await
        .expect("migrated");
}
