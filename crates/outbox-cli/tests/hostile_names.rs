//! Schema names at the edge of what `outbox migrate` accepts: a schema of
//! 63 characters (PostgreSQL's longest identifier) is migrated, produced
//! into by plain SQL, `outbox_emit` and the library, and delivered by a
//! running relay, in every wake-up mode. Every name the outbox derives from
//! the schema's (the wake-up channel above all, which `pg_notify` refuses
//! over 63 bytes inside the producer's own transaction) must fit.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use outbox::{NewEvent, Outbox, Schema};
use outbox_testkit::postgres::test_db;
use sqlx::PgPool;

/// The longest schema name `outbox migrate` accepts.
fn longest_schema() -> String {
    format!("t{}", "x".repeat(62))
}

/// How long a relay may take to deliver what a test wrote.
const DELIVERY: Duration = Duration::from_secs(60);

/// `outbox migrate --schema SCHEMA ARGS` on `url`, which must succeed.
fn migrate(url: &str, schema: &str, args: &[&str]) {
    let mut all = vec!["migrate", "--schema", schema];
    all.extend_from_slice(args);
    let out = common::run(&all, Some(url));
    assert!(
        out.status.success(),
        "migrate {args:?} failed: {}",
        common::text(&out.stderr)
    );
}

/// Waits until a relay has announced in `schema` that it is idle: from then
/// on the idle wake-up trigger notifies at every INSERT.
async fn wait_for_idle_announcement(pool: &PgPool, schema: &str) {
    let sql = format!(
        "SELECT coalesce(pg_sequence_last_value('{schema}.outbox_relay_idle_until'), 0)
                > date_part('epoch', now()) * 1000"
    );
    let deadline = Instant::now() + DELIVERY;
    loop {
        let idle: bool = sqlx::query_scalar(&sql).fetch_one(pool).await.unwrap();
        if idle {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the relay did not announce itself idle in {DELIVERY:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Writes one event each way a producer can into `schema`, each in its own
/// transaction, every one of which must commit; returns their ids.
async fn produce(pool: &PgPool, schema: &str) -> Vec<uuid::Uuid> {
    let mut ids = Vec::new();
    let mut tx = pool.begin().await.unwrap();
    let id: uuid::Uuid = sqlx::query_scalar(&format!(
        "INSERT INTO {schema}.outbox_events (aggregate_type, aggregate_id, event_type, payload)
         VALUES ('order', 'plain', 'order.created', '{{\"n\": 1}}') RETURNING id"
    ))
    .fetch_one(&mut *tx)
    .await
    .expect("a plain INSERT into the outbox");
    tx.commit().await.expect("committing the plain INSERT");
    ids.push(id);

    let mut tx = pool.begin().await.unwrap();
    let id: uuid::Uuid = sqlx::query_scalar(&format!(
        "SELECT {schema}.outbox_emit('order', 'emit', 'order.created', '{{\"n\": 2}}')"
    ))
    .fetch_one(&mut *tx)
    .await
    .expect("outbox_emit");
    tx.commit().await.expect("committing outbox_emit");
    ids.push(id);

    let outbox = Outbox::with_schema(Schema::new(schema).unwrap())
        .with_remote_wakeup(pool.clone(), Duration::ZERO);
    // What a relay hears: the library's wake-up reaches the channel it
    // listens on (with the `off` wake-up trigger, the only notification).
    let mut listener = sqlx::postgres::PgListener::connect_with(pool)
        .await
        .unwrap();
    listener.listen(&outbox.schema().channel()).await.unwrap();
    let mut tx = pool.begin().await.unwrap();
    let id = outbox
        .enqueue(
            &mut *tx,
            &NewEvent::json(
                "order",
                "library",
                "order.created",
                serde_json::json!({"n": 3}),
            ),
        )
        .await
        .expect("Outbox::enqueue");
    tx.commit().await.expect("committing Outbox::enqueue");
    outbox.wake();
    tokio::time::timeout(DELIVERY, listener.recv())
        .await
        .expect("the library's wake-up notified the relays' channel")
        .unwrap();
    ids.push(id);
    ids
}

/// Waits until every id in `ids` is in the JSON-lines file `file`.
async fn wait_for_deliveries(file: &Path, ids: &[uuid::Uuid]) {
    let deadline = Instant::now() + DELIVERY;
    loop {
        let got: Vec<String> = common::read_deliveries(file)
            .into_iter()
            .map(|(id, _, _)| id)
            .collect();
        if ids.iter().all(|id| got.contains(&id.to_string())) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "not all of {ids:?} delivered in {DELIVERY:?}: {got:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Migrates the 63-character schema with `--wakeup-trigger mode`, starts a
/// relay on it, and produces and delivers each way.
async fn produce_and_deliver(mode: &str) {
    let db = test_db().await;
    let pool = db.pool().await;
    let schema = longest_schema();
    migrate(&db.url, &schema, &["--wakeup-trigger", mode]);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("events.jsonl");
    let mut relay = common::spawn_relay(&db.url, &file, "names", &["--schema", &schema]);
    if mode == "idle" {
        wait_for_idle_announcement(&pool, &schema).await;
    }
    let ids = produce(&pool, &schema).await;
    wait_for_deliveries(&file, &ids).await;
    // A second round while the relay is idle again after the first.
    if mode == "idle" {
        wait_for_idle_announcement(&pool, &schema).await;
    }
    let more = produce(&pool, &schema).await;
    wait_for_deliveries(&file, &more).await;
    relay.kill().unwrap();
    relay.wait().unwrap();
}

#[tokio::test]
async fn a_63_character_schema_produces_and_delivers_with_the_idle_wakeup() {
    produce_and_deliver("idle").await;
}

#[tokio::test]
async fn a_63_character_schema_produces_and_delivers_with_a_wakeup_per_insert() {
    produce_and_deliver("every-insert").await;
}

#[tokio::test]
async fn a_63_character_schema_produces_and_delivers_without_a_wakeup_trigger() {
    produce_and_deliver("off").await;
}

/// A long schema migrated when its triggers notified a channel over 63
/// bytes (every INSERT failed once a relay was idle) works after `outbox
/// migrate` brings it up to date: the upgrade renders the wake-up
/// functions with the channel that fits.
#[tokio::test]
async fn upgrading_a_long_schema_whose_triggers_notified_a_channel_too_long_repairs_them() {
    let db = test_db().await;
    let pool = db.pool().await;
    let schema = longest_schema();
    migrate(&db.url, &schema, &["--wakeup-trigger", "every-insert"]);
    // The functions as an older build rendered them, and that build's
    // record of migrations.
    let too_long = format!("{schema}_outbox_event");
    for function in ["outbox_wake_idle_relay", "notify_outbox_insert"] {
        let body: String = sqlx::query_scalar(&format!(
            "SELECT pg_get_functiondef('{schema}.{function}'::regproc)"
        ))
        .fetch_one(&pool)
        .await
        .unwrap();
        let channel = Schema::new(&schema).unwrap().channel();
        assert!(body.contains(&channel), "{body}");
        sqlx::raw_sql(&body.replace(&channel, &too_long))
            .execute(&pool)
            .await
            .unwrap();
    }
    sqlx::query(&format!(
        "DELETE FROM {schema}.outbox_schema_migrations WHERE version = 16"
    ))
    .execute(&pool)
    .await
    .unwrap();
    let refused = sqlx::query(&format!(
        "INSERT INTO {schema}.outbox_events (aggregate_type, aggregate_id, event_type, payload)
         VALUES ('order', 'old', 'order.created', '{{}}')"
    ))
    .execute(&pool)
    .await
    .expect_err("the older build's trigger fails the INSERT")
    .to_string();
    assert!(refused.contains("channel name too long"), "{refused}");

    migrate(&db.url, &schema, &[]);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("events.jsonl");
    let mut relay = common::spawn_relay(&db.url, &file, "names", &["--schema", &schema]);
    let ids = produce(&pool, &schema).await;
    wait_for_deliveries(&file, &ids).await;
    let every_insert: bool = sqlx::query_scalar(&format!(
        "SELECT EXISTS (SELECT FROM pg_trigger
                         WHERE tgrelid = '{schema}.outbox_events'::regclass
                           AND tgname = 'outbox_insert_notify')"
    ))
    .fetch_one(&pool)
    .await
    .unwrap();
    assert!(every_insert, "the upgrade kept the schema's wake-up mode");
    relay.kill().unwrap();
    relay.wait().unwrap();
    // The idle wake-up function was repaired too (a relay reads the
    // schema's wake-up mode when it starts).
    migrate(&db.url, &schema, &["--wakeup-trigger", "idle"]);
    let mut relay = common::spawn_relay(&db.url, &file, "names", &["--schema", &schema]);
    wait_for_idle_announcement(&pool, &schema).await;
    let more = produce(&pool, &schema).await;
    wait_for_deliveries(&file, &more).await;
    relay.kill().unwrap();
    relay.wait().unwrap();
}
