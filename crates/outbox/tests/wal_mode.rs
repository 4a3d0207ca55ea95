//! `outbox migrate --mode wal` and `outbox_emit`, on a real PostgreSQL
//! started with `wal_level = logical`: the server's refusals, the slot,
//! what producers write (messages, never rows), what a rollback leaves
//! (nothing), and the switch back to the table.
//!
//! Messages are read back with a `test_decoding` slot made beside the
//! mode's own (`pgoutput`) slot: it prints each message's prefix and
//! content as text.

mod common;

use common::logical::{database, logical_cluster};
use outbox::{DeliveryMode, MigrateOptions, NewEvent, Outbox, Schema};
use outbox_testkit::postgres::{PgCluster, PgOptions};
use sqlx::postgres::{PgConnection, PgPool};
use sqlx::{Connection, Executor};

fn wal(schema_slot: Option<&str>) -> MigrateOptions {
    MigrateOptions {
        mode: Some(DeliveryMode::Wal),
        slot: schema_slot.map(str::to_owned),
        ..MigrateOptions::default()
    }
}

/// A `test_decoding` slot named `name`, made now: it holds every message
/// committed after this call.
async fn reader_slot(pool: &PgPool, name: &str) {
    sqlx::query("SELECT pg_create_logical_replication_slot($1, 'test_decoding')")
        .bind(name)
        .execute(pool)
        .await
        .unwrap();
}

/// The contents of the messages with `prefix` committed into slot `name`
/// so far, in commit order (consumed: the next call sees only newer ones).
async fn messages(pool: &PgPool, name: &str, prefix: &str) -> Vec<String> {
    let rows: Vec<String> = sqlx::query_scalar(
        "SELECT data FROM pg_logical_slot_get_changes($1, NULL, NULL)
         WHERE data LIKE 'message: %'",
    )
    .bind(name)
    .fetch_all(pool)
    .await
    .unwrap();
    let head = format!("message: transactional: 1 prefix: {prefix}, sz: ");
    rows.into_iter()
        .filter_map(|r| {
            let rest = r.strip_prefix(&head)?;
            let (_, content) = rest.split_once(" content:")?;
            Some(content.to_owned())
        })
        .collect()
}

/// The message content after its id and time: what the test can predict.
fn after_time(content: &str) -> &str {
    let mut parts = content.splitn(3, ' ');
    parts.next();
    parts.next();
    parts.next().unwrap()
}

async fn scalar_i64(pool: &PgPool, sql: &str) -> i64 {
    sqlx::query_scalar(sql).fetch_one(pool).await.unwrap()
}

#[tokio::test]
async fn wal_mode_is_refused_on_wal_level_replica_naming_the_fix_and_nothing_is_created() {
    let db = outbox_testkit::postgres::test_db().await;
    let pool = db.pool().await;
    let level: String = sqlx::query_scalar("SHOW wal_level")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_ne!(level, "logical", "the shared cluster runs the default");
    let mut conn = pool.acquire().await.unwrap();
    let err = outbox::migrate(&mut conn, &Schema::default(), &wal(None))
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("wal_level = logical") && err.contains("ALTER SYSTEM SET wal_level"),
        "{err}"
    );
    assert_eq!(
        scalar_i64(
            &pool,
            "SELECT count(*) FROM pg_class WHERE relname = 'outbox_events'"
        )
        .await,
        0,
        "a refused switch created the tables"
    );
    assert_eq!(
        scalar_i64(&pool, "SELECT count(*) FROM pg_replication_slots").await,
        0
    );
}

#[tokio::test]
async fn wal_mode_creates_its_slot_and_outbox_emit_writes_a_message_never_a_row() {
    let cluster = logical_cluster().await;
    let (_url, pool) = database(cluster).await;
    let schema = Schema::new("shop").unwrap();
    let mut conn = pool.acquire().await.unwrap();
    let report = outbox::migrate(&mut conn, &schema, &wal(Some("shop_events")))
        .await
        .unwrap();
    assert_eq!(report.mode, DeliveryMode::Wal);
    assert_eq!(report.slot.as_deref(), Some("shop_events"));
    assert!(report.slot_created);
    let (kind, plugin): (String, String) = sqlx::query_as(
        "SELECT slot_type, plugin FROM pg_replication_slots WHERE slot_name = 'shop_events'",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!((kind.as_str(), plugin.as_str()), ("logical", "pgoutput"));
    // Again: nothing new, the same slot.
    let again = outbox::migrate(&mut conn, &schema, &wal(Some("shop_events")))
        .await
        .unwrap();
    assert!(again.applied.is_empty() && !again.slot_created);
    drop(conn);

    reader_slot(&pool, "reader_emit").await;
    let id: uuid::Uuid = sqlx::query_scalar(
        "SELECT shop.outbox_emit('order', 'order-1', 'order.placed',
                                 '{\"total\": 12345678901234567890, \"note\": \"caf\u{e9} \u{1F600}\", \"nested\": {\"a\": [1, {\"b\": null}]}}',
                                 '{\"traceparent\": \"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01\"}',
                                 'orders.v1')",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(id.get_version_num(), 7, "the id is time-ordered");
    assert_eq!(
        scalar_i64(&pool, "SELECT count(*) FROM shop.outbox_events").await,
        0
    );
    let got = messages(&pool, "reader_emit", "outbox:shop").await;
    assert_eq!(got.len(), 1, "{got:?}");
    assert!(got[0].starts_with(&format!("{id} ")), "{}", got[0]);
    let decoded = outbox::test_seam::wal_message_decode(&got[0]).unwrap();
    assert_eq!(decoded.id, id);
    assert_eq!(
        (
            decoded.aggregate_type,
            decoded.aggregate_id,
            decoded.event_type,
            decoded.topic
        ),
        ("order", "order-1", "order.placed", Some("orders.v1"))
    );
    assert_eq!(
        decoded.payload,
        "{\"note\": \"caf\u{e9} \u{1F600}\", \"total\": 12345678901234567890, \"nested\": {\"a\": [1, {\"b\": null}]}}",
        "the payload as jsonb prints it, as the table mode publishes it"
    );
    assert_eq!(
        decoded.headers,
        "{\"traceparent\": \"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01\"}"
    );
    let now_micros: i64 = sqlx::query_scalar("SELECT (date_part('epoch', now()) * 1000000)::int8")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert!((now_micros - decoded.created_at_micros).abs() < 60_000_000);
}

#[tokio::test]
async fn a_rolled_back_transaction_or_savepoint_emits_nothing() {
    let cluster = logical_cluster().await;
    let (_url, pool) = database(cluster).await;
    let mut conn = pool.acquire().await.unwrap();
    outbox::migrate(&mut conn, &Schema::default(), &wal(Some("slot_rollback")))
        .await
        .unwrap();
    reader_slot(&pool, "reader_rollback").await;
    let emit =
        |agg: &'static str| format!("SELECT outbox_emit('order', '{agg}', 'order.placed', '{{}}')");

    let mut tx = conn.begin().await.unwrap();
    tx.execute(emit("rolled-back").as_str()).await.unwrap();
    tx.rollback().await.unwrap();

    let mut tx = conn.begin().await.unwrap();
    tx.execute(emit("kept-1").as_str()).await.unwrap();
    tx.execute("SAVEPOINT s").await.unwrap();
    tx.execute(emit("savepoint-undone").as_str()).await.unwrap();
    tx.execute("ROLLBACK TO SAVEPOINT s").await.unwrap();
    tx.execute(emit("kept-2").as_str()).await.unwrap();
    tx.commit().await.unwrap();

    let got: Vec<String> = messages(&pool, "reader_rollback", "outbox:public")
        .await
        .iter()
        .map(|m| after_time(m).to_owned())
        .collect();
    assert_eq!(
        got,
        [
            "5 order6 kept-112 order.placed- 2 {}{}",
            "5 order6 kept-212 order.placed- 2 {}{}"
        ]
    );
}

#[tokio::test]
async fn a_plain_insert_in_wal_mode_is_captured_as_the_same_message_and_stores_no_row() {
    let cluster = logical_cluster().await;
    let (_url, pool) = database(cluster).await;
    let mut conn = pool.acquire().await.unwrap();
    outbox::migrate(&mut conn, &Schema::default(), &wal(Some("slot_insert")))
        .await
        .unwrap();
    reader_slot(&pool, "reader_insert").await;
    let inserted = sqlx::query(
        "INSERT INTO outbox_events (id, aggregate_type, aggregate_id, event_type, payload)
         VALUES ('00000000-0000-4000-8000-000000000001', 'order', 'o-9', 'order.paid', '{\"n\": 1}')",
    )
    .execute(&pool)
    .await
    .unwrap();
    assert_eq!(inserted.rows_affected(), 0, "captured, not stored");
    assert_eq!(
        scalar_i64(&pool, "SELECT count(*) FROM outbox_events").await,
        0
    );
    let got = messages(&pool, "reader_insert", "outbox:public").await;
    assert_eq!(got.len(), 1);
    assert!(got[0].starts_with("00000000-0000-4000-8000-000000000001 "));
    assert_eq!(
        after_time(&got[0]),
        "5 order3 o-910 order.paid- 2 {}{\"n\": 1}"
    );

    // The relay's own writes (retrying rows) are stored.
    let mut tx = conn.begin().await.unwrap();
    tx.execute("SET LOCAL outbox.table_write = 'on'")
        .await
        .unwrap();
    tx.execute(
        "INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload)
         VALUES ('order', 'o-9', 'order.paid', '{}')",
    )
    .await
    .unwrap();
    tx.commit().await.unwrap();
    assert_eq!(
        scalar_i64(&pool, "SELECT count(*) FROM outbox_events").await,
        1
    );
    assert!(messages(&pool, "reader_insert", "outbox:public")
        .await
        .is_empty());
}

/// What a statement's failure says: its SQLSTATE and message.
async fn refusal(pool: &PgPool, sql: &str) -> (String, String) {
    let err = sqlx::query(sql).execute(pool).await.unwrap_err();
    let db = err.as_database_error().expect("a database error");
    (db.code().unwrap().into_owned(), db.message().to_owned())
}

#[tokio::test]
async fn outbox_emit_refuses_what_the_table_refuses_with_the_tables_messages() {
    let cluster = logical_cluster().await;
    let (_url, pool) = database(cluster).await;
    let mut conn = pool.acquire().await.unwrap();
    // The table mode's schema refuses by its checks; the WAL mode's
    // function by its own: each case must read the same.
    outbox::migrate(&mut conn, &Schema::new("tbl").unwrap(), &Default::default())
        .await
        .unwrap();
    outbox::migrate(&mut conn, &Schema::default(), &wal(Some("slot_refusals")))
        .await
        .unwrap();
    drop(conn);
    let long = "x".repeat(101);
    let cases = [
        ("NULL, 'a', 'e', '{}', '{}', NULL", "aggregate_type"),
        ("'t', NULL, 'e', '{}', '{}', NULL", "aggregate_id"),
        ("'t', 'a', NULL, '{}', '{}', NULL", "event_type"),
        ("'t', 'a', 'e', NULL, '{}', NULL", "payload"),
        ("'t', 'a', 'e', '{}', NULL, NULL", "headers"),
    ];
    for (args, field) in cases {
        let table = refusal(&pool, &format!("SELECT tbl.outbox_emit({args})")).await;
        let wal = refusal(&pool, &format!("SELECT public.outbox_emit({args})")).await;
        assert_eq!(table.0, "23502", "{field}: {table:?}");
        assert_eq!(
            wal, table,
            "{field}: the WAL mode's refusal differs from the table's"
        );
        assert!(wal.1.contains(&format!("\"{field}\"")), "{wal:?}");
    }
    for (args, field) in [
        (format!("'{long}', 'a', 'e', '{{}}'"), "aggregate_type"),
        (format!("'t', '{long}', 'e', '{{}}'"), "aggregate_id"),
        (format!("'t', 'a', '{long}', '{{}}'"), "event_type"),
        (
            format!("'t', 'a', 'e', '{{}}', '{{}}', '{}'", "y".repeat(256)),
            "topic",
        ),
    ] {
        let table = refusal(&pool, &format!("SELECT tbl.outbox_emit({args})")).await;
        let wal = refusal(&pool, &format!("SELECT public.outbox_emit({args})")).await;
        assert_eq!(wal.0, table.0, "{field}");
        assert!(
            wal.1.starts_with(&table.1) && wal.1.contains(field),
            "{field}: {wal:?} does not read as {table:?} naming the field"
        );
    }
    // 100 characters of two bytes each pass both (and a topic of 255):
    // over the bounds in bytes, within them in characters.
    let wide = "\u{e9}".repeat(100);
    let wide_topic = "\u{e9}".repeat(255);
    for schema in ["tbl", "public"] {
        sqlx::query(&format!(
            "SELECT {schema}.outbox_emit('{wide}', '{wide}', '{wide}', '{{}}', '{{}}', '{wide_topic}')"
        ))
        .execute(&pool)
        .await
        .unwrap_or_else(|e| panic!("{schema} refused 100 characters: {e}"));
    }
    let table = refusal(&pool, "SELECT tbl.outbox_emit('t', 'a', 'e', '{}', '[1]')").await;
    let wal = refusal(
        &pool,
        "SELECT public.outbox_emit('t', 'a', 'e', '{}', '[1]')",
    )
    .await;
    assert_eq!(table.0, "23514");
    // The domain is named as PostgreSQL names it: schema-qualified only
    // off the search path (tbl is, public is not).
    assert_eq!(
        wal,
        (
            table.0.clone(),
            table.1.replace("tbl.outbox_headers", "outbox_headers")
        ),
        "headers that are not an object: the same check, the same words"
    );
}

#[tokio::test]
async fn the_library_emits_in_wal_mode_one_event_or_many_in_order() {
    let cluster = logical_cluster().await;
    let (_url, pool) = database(cluster).await;
    let mut conn = pool.acquire().await.unwrap();
    let report = outbox::migrate(&mut conn, &Schema::default(), &wal(None))
        .await
        .unwrap();
    assert_eq!(report.slot.as_deref(), Some("outbox_public"));
    drop(conn);
    reader_slot(&pool, "reader_library").await;
    let outbox = Outbox::new().with_delivery(DeliveryMode::Wal);
    let one = NewEvent::new("order", "o-1", "order.placed", &serde_json::json!({"n": 0}))
        .unwrap()
        .header(
            "traceparent",
            "00-0af7651916cd43dd8448eb211c80319c-00f067aa0ba902b7-01",
        )
        .topic("orders");
    let mut tx = pool.begin().await.unwrap();
    let first = outbox.enqueue(&mut *tx, &one).await.unwrap();
    let many: Vec<NewEvent> = (1..=50)
        .map(|n| {
            NewEvent::new(
                "order",
                format!("o-{}", n % 3),
                "order.updated",
                &serde_json::json!({"n": n}),
            )
            .unwrap()
        })
        .collect();
    let ids = outbox.enqueue_many(&mut *tx, &many).await.unwrap();
    tx.commit().await.unwrap();
    assert_eq!(
        scalar_i64(&pool, "SELECT count(*) FROM outbox_events").await,
        0
    );

    let got = messages(&pool, "reader_library", "outbox:public").await;
    assert_eq!(got.len(), 51);
    let decoded: Vec<_> = got
        .iter()
        .map(|m| outbox::test_seam::wal_message_decode(m).unwrap())
        .collect();
    assert_eq!(decoded[0].id, first);
    assert_eq!(decoded[0].topic, Some("orders"));
    assert!(
        decoded[0].headers.contains("00f067aa0ba902b7"),
        "{}",
        decoded[0].headers
    );
    for (n, (d, id)) in decoded[1..].iter().zip(&ids).enumerate() {
        assert_eq!(d.id, *id, "message {n} is out of the given order");
        assert_eq!(d.payload, format!("{{\"n\": {}}}", n + 1));
    }
}

#[tokio::test]
async fn switching_back_to_the_table_stores_rows_again_and_keeps_the_slot() {
    let cluster = logical_cluster().await;
    let (_url, pool) = database(cluster).await;
    let mut conn = pool.acquire().await.unwrap();
    outbox::migrate(&mut conn, &Schema::default(), &wal(Some("switch_slot")))
        .await
        .unwrap();
    let back = outbox::migrate(
        &mut conn,
        &Schema::default(),
        &MigrateOptions {
            mode: Some(DeliveryMode::Table),
            ..MigrateOptions::default()
        },
    )
    .await
    .unwrap();
    assert_eq!(back.mode, DeliveryMode::Table);
    assert_eq!(back.slot.as_deref(), Some("switch_slot"));
    drop(conn);
    sqlx::query("SELECT outbox_emit('order', 'o-1', 'order.placed', '{}')")
        .execute(&pool)
        .await
        .unwrap();
    let outbox = Outbox::new().with_delivery(DeliveryMode::Wal);
    let event = NewEvent::new("order", "o-1", "order.paid", &serde_json::json!({})).unwrap();
    outbox.enqueue(&pool, &event).await.unwrap();
    outbox
        .enqueue_many(&pool, &[event.clone().with_id(uuid::Uuid::now_v7())])
        .await
        .unwrap();
    assert_eq!(
        scalar_i64(&pool, "SELECT count(*) FROM outbox_events").await,
        3,
        "a handle still in the WAL mode writes rows after the switch back"
    );
    assert_eq!(
        scalar_i64(
            &pool,
            "SELECT count(*) FROM pg_replication_slots WHERE slot_name = 'switch_slot'"
        )
        .await,
        1
    );
}

#[tokio::test]
async fn a_role_without_replication_or_a_slot_taken_by_another_use_is_refused_with_the_fix() {
    let cluster = logical_cluster().await;
    let (url, pool) = database(cluster).await;
    pool.execute("CREATE ROLE producer_only LOGIN")
        .await
        .unwrap();
    let db: String = sqlx::query_scalar("SELECT current_database()::text")
        .fetch_one(&pool)
        .await
        .unwrap();
    pool.execute(format!("GRANT CREATE ON DATABASE {db} TO producer_only").as_str())
        .await
        .unwrap();
    let as_producer = url.replacen("postgres@", "producer_only@", 1);
    assert_ne!(as_producer, url, "the cluster's url names its user: {url}");
    let mut producer = PgConnection::connect(&as_producer).await.unwrap();
    let err = outbox::migrate(&mut producer, &Schema::new("p").unwrap(), &wal(None))
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("producer_only has no REPLICATION")
            && err.contains("ALTER ROLE producer_only REPLICATION"),
        "{err}"
    );

    sqlx::query("SELECT pg_create_logical_replication_slot('taken', 'test_decoding')")
        .execute(&pool)
        .await
        .unwrap();
    let mut conn = pool.acquire().await.unwrap();
    let err = outbox::migrate(&mut conn, &Schema::new("q").unwrap(), &wal(Some("taken")))
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("--slot") && err.contains("test_decoding"),
        "{err}"
    );
    assert_eq!(
        scalar_i64(
            &pool,
            "SELECT count(*) FROM pg_namespace WHERE nspname IN ('p', 'q')"
        )
        .await,
        0,
        "a refused switch created a schema"
    );
}

#[tokio::test]
async fn no_free_replication_slot_is_refused_naming_max_replication_slots() {
    let mut cluster = tokio::task::spawn_blocking(|| {
        PgCluster::start_with(PgOptions {
            extra_conf: vec![
                ("wal_level".into(), "logical".into()),
                ("max_replication_slots".into(), "1".into()),
            ],
            ..PgOptions::default()
        })
    })
    .await
    .unwrap()
    .unwrap();
    let (_url, pool) = database(&cluster).await;
    sqlx::query("SELECT pg_create_logical_replication_slot('the_only_one', 'test_decoding')")
        .execute(&pool)
        .await
        .unwrap();
    let mut conn = pool.acquire().await.unwrap();
    let err = outbox::migrate(&mut conn, &Schema::default(), &wal(None))
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("max_replication_slots") && err.contains("pg_drop_replication_slot"),
        "{err}"
    );
    assert_eq!(
        scalar_i64(
            &pool,
            "SELECT count(*) FROM pg_class WHERE relname = 'outbox_events'"
        )
        .await,
        0
    );
    drop(conn);
    pool.close().await;
    cluster.stop().unwrap();
}
