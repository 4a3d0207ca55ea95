//! Migrations: idempotent, usable from plain SQL, in any schema.

mod common;

use outbox::{MigrateOptions, Schema};
use outbox_testkit::postgres::test_db;

/// A fresh database nothing has migrated yet (dropped with the first
/// element), a pool on it and one connection of that pool.
async fn unmigrated() -> (
    outbox_testkit::postgres::TestDb,
    sqlx::PgPool,
    sqlx::pool::PoolConnection<sqlx::Postgres>,
) {
    let db = test_db().await;
    let pool = db.pool().await;
    let conn = pool.acquire().await.unwrap();
    (db, pool, conn)
}

/// Migrates the default schema on `conn` with the seed notify trigger
/// turned on or off, which must succeed.
async fn migrate_with_notify_trigger(
    conn: &mut sqlx::PgConnection,
    on: bool,
) -> outbox::MigrationReport {
    let options = MigrateOptions {
        partitions: None,
        notify_trigger: Some(on),
        ..MigrateOptions::default()
    };
    outbox::migrate(conn, &Schema::default(), &options)
        .await
        .unwrap()
}

/// Migrates the default schema on `conn` with the default options, which
/// must succeed.
async fn migrate_default(conn: &mut sqlx::PgConnection) -> outbox::MigrationReport {
    outbox::migrate(conn, &Schema::default(), &Default::default())
        .await
        .unwrap()
}

#[tokio::test]
async fn migrating_twice_is_a_no_op() {
    let (_db, _pool, mut conn) = unmigrated().await;
    let first = migrate_default(&mut conn).await;
    assert_eq!(
        first.applied,
        vec![
            "0001_outbox".to_owned(),
            "0002_finite_timestamps".to_owned(),
            "0003_idle_wakeup".to_owned(),
            "0004_xid_first".to_owned(),
            "0005_retry_index".to_owned(),
            "0006_one_wakeup_trigger".to_owned(),
            "0007_idle_flag_in_a_sequence".to_owned(),
            "0008_seq_always_positive".to_owned(),
            "0009_cheaper_inserts".to_owned(),
            "0010_pause".to_owned(),
            "0011_partition_function_and_row_checks".to_owned(),
            "0012_dead_letter_index".to_owned(),
            "0013_emit".to_owned(),
            "0014_wal_switch_mark".to_owned(),
            "0015_pauses_notify".to_owned(),
            "0016_channel_names_fit".to_owned(),
            "0017_pauses_in_the_stream".to_owned()
        ]
    );
    assert_eq!(first.partitions, 32);
    let second = migrate_default(&mut conn).await;
    assert!(second.applied.is_empty());
    assert_eq!(second.partitions, 32);
}

#[tokio::test]
async fn plain_sql_insert_works_with_every_other_column_defaulted() {
    let ctx = common::setup().await;
    sqlx::query(
        "INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload)
         VALUES ('order', '42', 'order.created', '{\"total\": 10}')",
    )
    .execute(&ctx.pool)
    .await
    .unwrap();
    let (attempts, headers, partition, seq): (i32, serde_json::Value, i32, i64) = sqlx::query_as(
        "SELECT attempts, headers, outbox_partition(aggregate_id), seq FROM outbox_events",
    )
    .fetch_one(&ctx.pool)
    .await
    .unwrap();
    assert_eq!(attempts, 0);
    assert_eq!(headers, serde_json::json!({}));
    assert!((0..32).contains(&partition));
    assert!(seq >= 1);
    // the seed's view and inbox table exist
    assert_eq!(
        common::count(&ctx.pool, "SELECT count(*) FROM outbox_dead_letters").await,
        0
    );
    assert_eq!(
        common::count(&ctx.pool, "SELECT count(*) FROM processed_events").await,
        0
    );
}

#[tokio::test]
async fn a_custom_schema_holds_everything_and_partition_count_is_fixed() {
    let (_db, pool, mut conn) = unmigrated().await;
    let schema = Schema::new("billing").unwrap();
    let opts = MigrateOptions {
        partitions: Some(8),
        notify_trigger: None,
        ..MigrateOptions::default()
    };
    let report = outbox::migrate(&mut conn, &schema, &opts).await.unwrap();
    assert_eq!(report.partitions, 8);
    let n: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM pg_tables WHERE schemaname = 'billing'
           AND tablename IN ('outbox_events', 'processed_events', 'outbox_partitions')",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(n, 3);
    let none: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM pg_tables WHERE schemaname = 'public' AND tablename = 'outbox_events'",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(none, 0);
    let err = outbox::migrate(
        &mut conn,
        &schema,
        &MigrateOptions {
            partitions: Some(16),
            notify_trigger: None,
            ..MigrateOptions::default()
        },
    )
    .await
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("partitions") && err.contains('8') && err.contains("16"),
        "{err}"
    );
}

#[tokio::test]
async fn ensure_migrated_names_the_missing_table_and_the_fix() {
    let (_db, _pool, mut conn) = unmigrated().await;
    let err = outbox::ensure_migrated(&mut conn, &Schema::default())
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("outbox_events") && err.contains("outbox migrate"),
        "{err}"
    );
}

#[tokio::test]
async fn the_seed_notify_trigger_is_opt_in_and_removable() {
    let (_db, pool, mut conn) = unmigrated().await;
    let off = migrate_default(&mut conn).await;
    assert!(!off.notify_trigger);
    let on = migrate_with_notify_trigger(&mut conn, true).await;
    assert!(on.notify_trigger);
    let mut listener = sqlx::postgres::PgListener::connect_with(&pool)
        .await
        .unwrap();
    listener.listen("outbox_event").await.unwrap();
    sqlx::query(
        "INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload)
         VALUES ('order', '1', 'order.created', '{}') RETURNING id",
    )
    .execute(&pool)
    .await
    .unwrap();
    let note = tokio::time::timeout(std::time::Duration::from_secs(10), listener.recv())
        .await
        .expect("a notification from the trigger")
        .unwrap();
    assert_eq!(note.channel(), "outbox_event");
    let off = migrate_with_notify_trigger(&mut conn, false).await;
    assert!(!off.notify_trigger);
}

/// A schema created by the first release (migration 1 only, as its
/// `migrate` left it), holding pending events written by plain SQL and a
/// dead letter: `migrate` brings it up to date in
/// place, and a relay then delivers every pending event once, each
/// aggregate's in order, leaving the dead letter where it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upgrading_a_first_release_schema_keeps_pending_events_and_their_order() {
    let db = test_db().await;
    let ctx = common::Ctx {
        pool: db.pool().await,
        db,
        outbox: outbox::Outbox::new(),
    };
    let first_release = include_str!("../migrations/0001_outbox.sql")
        .replace("{schema}", "public")
        .replace("{partitions}", "32")
        .replace("{channel}", &Schema::default().channel());
    sqlx::raw_sql(&format!(
        "BEGIN;
         CREATE TABLE public.outbox_schema_migrations (
             version    INT PRIMARY KEY,
             name       TEXT NOT NULL,
             applied_at TIMESTAMPTZ NOT NULL DEFAULT NOW());
         {first_release}
         INSERT INTO public.outbox_schema_migrations (version, name) VALUES (1, 'outbox');
         COMMIT;"
    ))
    .execute(&ctx.pool)
    .await
    .expect("the first release's schema");
    // 20 aggregates × 10 events, one statement per round, by plain SQL.
    for n in 1..=10_i64 {
        sqlx::query(
            "INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload)
             SELECT 'order', 'agg-' || a, 'order.updated', jsonb_build_object('n', $1::bigint)
             FROM generate_series(0, 19) AS a",
        )
        .bind(n)
        .execute(&ctx.pool)
        .await
        .unwrap();
    }
    sqlx::query(
        "INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload,
                                    dead_lettered_at, attempts, last_error)
         VALUES ('order', 'dead', 'order.updated', '{\"n\": 1}', now(), 5, 'broker said no')",
    )
    .execute(&ctx.pool)
    .await
    .unwrap();

    let mut conn = ctx.pool.acquire().await.unwrap();
    let report = outbox::migrate(&mut conn, &Schema::default(), &Default::default())
        .await
        .expect("upgrading in place");
    drop(conn);
    assert_eq!(
        report.applied,
        [
            "0002_finite_timestamps",
            "0003_idle_wakeup",
            "0004_xid_first",
            "0005_retry_index",
            "0006_one_wakeup_trigger",
            "0007_idle_flag_in_a_sequence",
            "0008_seq_always_positive",
            "0009_cheaper_inserts",
            "0010_pause",
            "0011_partition_function_and_row_checks",
            "0012_dead_letter_index",
            "0013_emit",
            "0014_wal_switch_mark",
            "0015_pauses_notify",
            "0016_channel_names_fit",
            "0017_pauses_in_the_stream"
        ]
    );
    assert_eq!(report.partitions, 32);
    assert_eq!(
        common::count(&ctx.pool, common::EVENTS).await,
        201,
        "the upgrade kept every row"
    );

    let publisher = outbox_testkit::TestPublisher::new();
    let relay = common::start_relay(&ctx, &publisher, common::fast_config("upgraded")).await;
    common::wait_for_count(
        &ctx.pool,
        "the pending events delivered",
        common::NOT_DEAD,
        0,
    )
    .await;
    relay.shutdown().await.unwrap();
    let delivered = publisher.deliveries();
    assert_eq!(delivered.len(), 200, "each pending event once");
    common::assert_first_deliveries_in_order(&delivered);
    assert_eq!(
        common::count(&ctx.pool, "SELECT count(*) FROM outbox_dead_letters").await,
        1,
        "the dead letter stays a dead letter"
    );
}

/// The claim cursor needs every inserting transaction to have its id before
/// a row draws its seq (migrations 4 and 6), in every wake-up mode and after
/// switching between them. A row trigger added here sees whether the id was
/// there once the row was formed (its seq drawn); without the statement
/// trigger it mostly is not (the sequence assigns one only every 32 values).
#[tokio::test]
async fn every_wakeup_mode_gives_an_inserting_transaction_its_id_before_its_seq() {
    use outbox::WakeupTrigger;
    let ctx = common::setup().await;
    sqlx::raw_sql(
        "CREATE TABLE xid_seen (mode text, had_id bool);
         CREATE FUNCTION record_xid() RETURNS trigger AS $$
         BEGIN
             INSERT INTO xid_seen VALUES (current_setting('test.mode'),
                                          pg_current_xact_id_if_assigned() IS NOT NULL);
             RETURN NEW;
         END $$ LANGUAGE plpgsql;
         CREATE TRIGGER a_record_xid BEFORE INSERT ON outbox_events
         FOR EACH ROW EXECUTE FUNCTION record_xid();",
    )
    .execute(&ctx.pool)
    .await
    .unwrap();
    for mode in [
        WakeupTrigger::Off,
        WakeupTrigger::EveryInsert,
        WakeupTrigger::Idle,
        WakeupTrigger::Off,
        WakeupTrigger::Idle,
    ] {
        let mut conn = ctx.pool.acquire().await.unwrap();
        let options = MigrateOptions {
            wakeup: Some(mode),
            ..Default::default()
        };
        let report = outbox::migrate(&mut conn, &Schema::default(), &options)
            .await
            .unwrap();
        assert_eq!(report.wakeup, mode);
        for _ in 0..8 {
            sqlx::raw_sql(&format!(
                "BEGIN; SET LOCAL test.mode = '{}';
                 INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload)
                 VALUES ('order', '1', 'order.created', '{{}}');
                 COMMIT;",
                mode.name()
            ))
            .execute(&mut *conn)
            .await
            .unwrap();
        }
    }
    let without: Vec<(String, i64)> = sqlx::query_as(
        "SELECT mode, count(*) FROM xid_seen WHERE NOT had_id GROUP BY mode ORDER BY mode",
    )
    .fetch_all(&ctx.pool)
    .await
    .unwrap();
    assert!(
        without.is_empty(),
        "rows that drew a seq before their transaction had an id: {without:?}"
    );
    assert_eq!(
        common::count(&ctx.pool, "SELECT count(*) FROM xid_seen").await,
        40
    );
}
