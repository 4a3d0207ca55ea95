//! The relay of a WAL-mode schema, on a real PostgreSQL with `wal_level =
//! logical`: it reads the schema's slot and publishes what committed, in
//! order per aggregate; failures wait in the table; a broker outage holds
//! the stream without burning attempts; a killed reader loses nothing and
//! its standby takes over; switching modes back and forth loses nothing.

mod common;

use std::time::Duration;

use common::logical::{database, logical_cluster};
use common::{event, position, LONG};
use outbox::{
    migrate, DeliveryMode, MigrateOptions, NewEvent, Outbox, Relay, RelayConfig, RelayHandle,
    ReplicationTarget, Schema,
};
use outbox_testkit::{assert_delivered_once_in_order, wait_until, Fail, Match, TestPublisher};
use sqlx::{Connection, PgPool};
use uuid::Uuid;

struct Wal {
    url: String,
    pool: PgPool,
    outbox: Outbox,
}

async fn switch(url: &str, mode: DeliveryMode) {
    let mut conn = sqlx::PgConnection::connect(url).await.unwrap();
    migrate(
        &mut conn,
        &Schema::default(),
        &MigrateOptions {
            mode: Some(mode),
            // Slot names are one namespace for the whole server: one per
            // test database.
            slot: (mode == DeliveryMode::Wal).then(|| slot_of(url)),
            ..MigrateOptions::default()
        },
    )
    .await
    .unwrap();
}

/// The slot of the test database at `url`: named after the database.
fn slot_of(url: &str) -> String {
    format!("outbox_{}", url.rsplit('/').next().unwrap())
}

/// A fresh database whose outbox is in the WAL mode.
async fn wal_db() -> Wal {
    let (url, pool) = database(logical_cluster().await).await;
    switch(&url, DeliveryMode::Wal).await;
    Wal {
        url,
        pool,
        outbox: Outbox::new().with_delivery(DeliveryMode::Wal),
    }
}

fn config(instance: &str) -> RelayConfig {
    common::fast_config(instance)
}

async fn start(db: &Wal, publisher: &TestPublisher, config: RelayConfig) -> RelayHandle {
    Relay::builder(db.pool.clone(), publisher.clone())
        .config(config)
        .replication(ReplicationTarget::from_url(&db.url).unwrap())
        .spawn()
        .await
        .unwrap()
}

async fn scalar(pool: &PgPool, sql: &str) -> i64 {
    sqlx::query_scalar(sql).fetch_one(pool).await.unwrap()
}

/// Bytes of WAL the database's slot holds for events not yet confirmed.
async fn slot_lag(pool: &PgPool) -> i64 {
    scalar(
        pool,
        "SELECT (pg_current_wal_lsn() - confirmed_flush_lsn)::bigint FROM pg_replication_slots
         WHERE database = current_database()",
    )
    .await
}

fn delivered(publisher: &TestPublisher) -> Vec<(Uuid, String, i64)> {
    publisher
        .deliveries()
        .iter()
        .map(|e| (e.id, e.aggregate_id.clone(), position(e)))
        .collect()
}

fn check(label: &str, expected: &[Uuid], publisher: &TestPublisher) -> usize {
    let got = delivered(publisher);
    let view: Vec<(Uuid, &str, i64)> = got.iter().map(|(i, a, n)| (*i, a.as_str(), *n)).collect();
    assert_delivered_once_in_order(label, expected, &view)
}

/// Emits `per` events for each of `aggregates`, `chunk` per transaction,
/// returning their ids.
async fn emit(db: &Wal, aggregates: &[&str], from: i64, per: i64) -> Vec<Uuid> {
    let mut ids = Vec::new();
    for n in from..from + per {
        let events: Vec<NewEvent> = aggregates.iter().map(|a| event(a, n)).collect();
        ids.extend(events.iter().map(|e| e.id));
        let mut tx = db.pool.begin().await.unwrap();
        db.outbox.enqueue_many(&mut *tx, &events).await.unwrap();
        tx.commit().await.unwrap();
    }
    ids
}

#[tokio::test]
async fn every_committed_event_is_published_once_in_order_and_nothing_rolled_back() {
    let db = wal_db().await;
    let publisher = TestPublisher::new();
    let relay = start(&db, &publisher, config("r1")).await;
    let mut expected = emit(&db, &["a", "b", "c"], 1, 40).await;

    // A rolled-back transaction, and a rolled-back savepoint inside a
    // committed one: only the savepoint's outer event is published.
    let mut tx = db.pool.begin().await.unwrap();
    db.outbox.enqueue(&mut *tx, &event("a", 999)).await.unwrap();
    tx.rollback().await.unwrap();
    let kept = event("d", 1);
    let mut tx = db.pool.begin().await.unwrap();
    db.outbox.enqueue(&mut *tx, &kept).await.unwrap();
    sqlx::query("SAVEPOINT s").execute(&mut *tx).await.unwrap();
    db.outbox.enqueue(&mut *tx, &event("d", 998)).await.unwrap();
    sqlx::query("ROLLBACK TO SAVEPOINT s")
        .execute(&mut *tx)
        .await
        .unwrap();
    tx.commit().await.unwrap();
    expected.push(kept.id);
    // A plain INSERT, as the seed's producers write: captured as a message.
    let plain = Uuid::now_v7();
    sqlx::query("INSERT INTO outbox_events (id, aggregate_type, aggregate_id, event_type, payload) VALUES ($1, 'order', 'd', 'order.updated', '{\"n\": 2}')")
        .bind(plain)
        .execute(&db.pool)
        .await
        .unwrap();
    expected.push(plain);

    wait_until("every committed event delivered", LONG, || async {
        publisher.delivered_count() >= expected.len()
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        check("", &expected, &publisher),
        0,
        "no duplicates without a crash"
    );
    assert!(!publisher.saw_same_aggregate_in_batch());
    assert_eq!(
        scalar(&db.pool, "SELECT count(*) FROM outbox_events").await,
        0,
        "no rows"
    );
    assert!(relay.slot().active());
    wait_until("the slot confirmed past every event", LONG, || async {
        slot_lag(&db.pool).await < 1_000
    })
    .await;
    relay.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_failing_event_and_the_rest_of_its_aggregate_wait_in_the_table_in_order() {
    let db = wal_db().await;
    let publisher = TestPublisher::new();
    // The first event of aggregate "poison" fails twice, then passes.
    let first = event("poison", 1);
    publisher.fail(Match::Id(first.id), Fail::Retry, Some(2));
    // All committed before the relay starts: the first batch holds them
    // all, so the healthy aggregate's events go out while poison waits.
    let mut tx = db.pool.begin().await.unwrap();
    db.outbox.enqueue(&mut *tx, &first).await.unwrap();
    tx.commit().await.unwrap();
    let mut expected = vec![first.id];
    expected.extend(emit(&db, &["poison", "ok"], 2, 20).await);
    let relay = start(&db, &publisher, config("r1")).await;

    wait_until("every event delivered", LONG, || async {
        publisher.delivered_count() >= expected.len()
    })
    .await;
    check("", &expected, &publisher);
    let attempts = publisher
        .attempts()
        .iter()
        .filter(|a| a.id == first.id)
        .count();
    assert_eq!(attempts, 3, "two failures, then the delivery");
    // Healthy aggregates were never held behind the failing one.
    let deliveries = publisher.deliveries();
    let first_at = deliveries.iter().position(|e| e.id == first.id).unwrap();
    let ok_before = deliveries[..first_at]
        .iter()
        .filter(|e| e.aggregate_id == "ok")
        .count();
    assert!(
        ok_before > 0,
        "the other aggregate went on while poison waited"
    );
    wait_until(
        "the table emptied by the table's own retries",
        LONG,
        || async { scalar(&db.pool, "SELECT count(*) FROM outbox_events").await == 0 },
    )
    .await;
    relay.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_rejected_event_is_dead_lettered_and_retrying_it_delivers_it() {
    let db = wal_db().await;
    let publisher = TestPublisher::new();
    let bad = event("x", 1);
    publisher.fail(Match::Id(bad.id), Fail::Reject, Some(1));
    let relay = start(&db, &publisher, config("r1")).await;
    let mut tx = db.pool.begin().await.unwrap();
    db.outbox.enqueue(&mut *tx, &bad).await.unwrap();
    tx.commit().await.unwrap();
    let later = emit(&db, &["x", "y"], 2, 5).await;
    wait_until("the others delivered", LONG, || async {
        publisher.delivered_count() >= later.len()
    })
    .await;
    wait_until("the rejected event dead-lettered", LONG, || async {
        scalar(&db.pool, "SELECT count(*) FROM outbox_dead_letters").await == 1
    })
    .await;
    let reason: String = sqlx::query_scalar("SELECT last_error FROM outbox_events WHERE id = $1")
        .bind(bad.id)
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert!(reason.contains("test rejection"), "{reason}");
    let mut conn = db.pool.acquire().await.unwrap();
    let retried = outbox::DeadLetters::new(&Schema::default())
        .retry(&mut conn, &outbox::Selector::ids([bad.id]))
        .await
        .unwrap();
    assert_eq!(retried, 1);
    wait_until("the retried dead letter delivered", LONG, || async {
        publisher.deliveries().iter().any(|e| e.id == bad.id)
    })
    .await;
    relay.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_broker_outage_holds_the_stream_without_attempts_and_delivers_everything_after() {
    let db = wal_db().await;
    let publisher = TestPublisher::new();
    let relay = start(&db, &publisher, config("r1")).await;
    publisher.set_down(true);
    let expected = emit(&db, &["a", "b"], 1, 30).await;
    wait_until("the outage seen", LONG, || async {
        publisher.unavailable_calls() >= 3
    })
    .await;
    assert!(slot_lag(&db.pool).await > 0, "the slot holds the events");
    assert_eq!(
        scalar(&db.pool, "SELECT count(*) FROM outbox_events").await,
        0,
        "nothing set aside, no attempt counted"
    );
    publisher.set_down(false);
    wait_until("everything delivered after the outage", LONG, || async {
        publisher.delivered_count() >= expected.len()
    })
    .await;
    check("", &expected, &publisher);
    let stats = relay.stats();
    assert_eq!((stats.retried, stats.dead_lettered), (0, 0));
    relay.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_killed_reader_loses_nothing_and_its_standby_takes_over() {
    let db = wal_db().await;
    let publisher = TestPublisher::new();
    let first = start(&db, &publisher, config("r1")).await;
    let second = start(&db, &publisher, config("r2")).await;
    assert!(
        first.slot().active() && !second.slot().active(),
        "one reader per slot"
    );
    let mut expected = emit(&db, &["a", "b", "c"], 1, 30).await;
    wait_until("some delivered", LONG, || async {
        publisher.delivered_count() > 10
    })
    .await;
    first.abort();
    expected.extend(emit(&db, &["a", "b", "c"], 31, 30).await);
    wait_until("the standby reads the slot", LONG, || async {
        second.slot().active()
    })
    .await;
    wait_until("everything delivered", LONG, || async {
        let got = delivered(&publisher);
        let ids: std::collections::HashSet<Uuid> = got.iter().map(|(i, _, _)| *i).collect();
        expected.iter().all(|id| ids.contains(id))
    })
    .await;
    check("", &expected, &publisher);
    second.shutdown().await.unwrap();
}

#[tokio::test]
async fn switching_table_to_wal_and_back_delivers_every_pending_event_once_in_order() {
    let (url, pool) = database(logical_cluster().await).await;
    let mut conn = sqlx::PgConnection::connect(&url).await.unwrap();
    migrate(&mut conn, &Schema::default(), &MigrateOptions::default())
        .await
        .unwrap();
    let table = Outbox::new();
    let wal = Outbox::new().with_delivery(DeliveryMode::Wal);
    let aggregates = ["a", "b", "c"];
    let mut expected = Vec::new();
    let mut n = 0;
    let mut write = |outbox: &Outbox, pool: &PgPool| {
        let outbox = outbox.clone();
        let pool = pool.clone();
        n += 5;
        let from = n - 4;
        async move {
            let mut ids = Vec::new();
            for k in from..from + 5 {
                let events: Vec<NewEvent> = aggregates.iter().map(|a| event(a, k)).collect();
                ids.extend(events.iter().map(|e| e.id));
                outbox.enqueue_many(&pool, &events).await.unwrap();
            }
            ids
        }
    };
    expected.extend(write(&table, &pool).await);
    switch(&url, DeliveryMode::Wal).await;
    expected.extend(write(&wal, &pool).await);
    switch(&url, DeliveryMode::Table).await;
    expected.extend(write(&table, &pool).await);
    assert_eq!(
        scalar(
            &pool,
            "SELECT count(*) FROM outbox_pauses WHERE aggregate_type IS NULL"
        )
        .await,
        1,
        "the table's rows wait for the slot's last events"
    );

    let db = Wal {
        url: url.clone(),
        pool: pool.clone(),
        outbox: table.clone(),
    };
    let publisher = TestPublisher::new();
    let relay = start(&db, &publisher, config("r1")).await;
    wait_until("every event delivered", LONG, || async {
        publisher.delivered_count() >= expected.len()
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    check("", &expected, &publisher);
    wait_until("the slot dropped after the switch", LONG, || async {
        scalar(
            &pool,
            "SELECT count(*) FROM pg_replication_slots WHERE database = current_database()",
        )
        .await
            == 0
    })
    .await;
    assert_eq!(
        scalar(&pool, "SELECT count(*) FROM outbox_pauses").await,
        0,
        "the switch's pause lifted"
    );
    assert!(!relay.is_finished(), "the table relay goes on");
    relay.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_transaction_larger_than_a_batch_is_published_in_batches_in_order() {
    let db = wal_db().await;
    let publisher = TestPublisher::new();
    let relay = start(&db, &publisher, config("r1")).await;
    // 2 aggregates x 130 events in one transaction: 260 events, batch 100.
    let events: Vec<NewEvent> = (1..=130)
        .flat_map(|n| [event("a", n), event("b", n)])
        .collect();
    let expected: Vec<Uuid> = events.iter().map(|e| e.id).collect();
    let mut tx = db.pool.begin().await.unwrap();
    db.outbox.enqueue_many(&mut *tx, &events).await.unwrap();
    tx.commit().await.unwrap();
    wait_until("the whole transaction delivered", LONG, || async {
        publisher.delivered_count() >= expected.len()
    })
    .await;
    assert_eq!(check("", &expected, &publisher), 0);
    assert!(
        publisher.max_batch_seen() <= 100,
        "batches of at most batch_size"
    );
    wait_until("the slot confirmed past it", LONG, || async {
        slot_lag(&db.pool).await < 1_000
    })
    .await;
    relay.shutdown().await.unwrap();
}

/// Faithful through the slow path: an event whose first publish fails is
/// stored in the table and delivered from there with the same payload
/// bytes and the same headers as its twin delivered straight from the
/// stream, for every hostile header set of the conformance suite.
#[tokio::test]
async fn an_event_set_aside_in_the_table_is_delivered_as_its_twin_from_the_stream() {
    use outbox_testkit::conformance::HOSTILE_HEADERS;
    let db = wal_db().await;
    let publisher = TestPublisher::new();
    let mut pairs = Vec::new();
    for (i, (_, headers)) in HOSTILE_HEADERS.iter().enumerate() {
        let payload = r#"'{"big": 123456789012345678901234567890, "s": "é \\ x"}'"#;
        let emit = |aggregate: String| {
            format!("SELECT outbox_emit('order', '{aggregate}', 'odd', {payload}, {headers})")
        };
        let direct: Uuid = sqlx::query_scalar(&emit(format!("direct-{i}")))
            .fetch_one(&db.pool)
            .await
            .unwrap();
        let aside: Uuid = sqlx::query_scalar(&emit(format!("aside-{i}")))
            .fetch_one(&db.pool)
            .await
            .unwrap();
        publisher.fail(Match::Id(aside), Fail::Retry, Some(1));
        pairs.push((direct, aside));
    }
    let relay = start(&db, &publisher, config("r1")).await;
    wait_until("every event delivered", LONG, || async {
        publisher.delivered_count() >= 2 * pairs.len()
    })
    .await;
    let got = publisher.deliveries();
    let find = |id: Uuid| got.iter().find(|e| e.id == id).expect("delivered").clone();
    for (direct, aside) in pairs {
        let (d, a) = (find(direct), find(aside));
        assert_eq!(a.payload, d.payload, "payload bytes");
        assert_eq!(a.headers, d.headers, "headers");
        assert_eq!(a.attempts, 1, "delivered from the table after one failure");
    }
    relay.shutdown().await.unwrap();
}

/// The content `outbox_emit` writes (migrations/wal_mode_on.sql), built by
/// hand as a forger would: `<id> <µs> ` then `<bytes> <value>` for the
/// aggregate type, aggregate id, event type, topic (`-` for none) and
/// headers, then the payload.
#[allow(clippy::too_many_arguments)]
fn message(
    id: Uuid,
    micros: i64,
    aggregate_type: &str,
    aggregate_id: &str,
    event_type: &str,
    topic: Option<&str>,
    headers: &str,
    payload: &str,
) -> String {
    let topic = topic.map_or("- ".to_owned(), |t| format!("{} {t}", t.len()));
    format!(
        "{id} {micros} {} {aggregate_type}{} {aggregate_id}{} {event_type}{topic}{} {headers}{payload}",
        aggregate_type.len(),
        aggregate_id.len(),
        event_type.len(),
        headers.len()
    )
}

/// Writes `content` with the outbox's prefix straight into the WAL, as any
/// role holding EXECUTE on `pg_logical_emit_message` can.
async fn forge(pool: &PgPool, content: &[u8]) {
    sqlx::query("SELECT pg_logical_emit_message(true, 'outbox:public', $1::bytea)")
        .bind(content)
        .execute(pool)
        .await
        .unwrap();
}

/// `outbox_emit` of event `n` of `aggregate`, by plain SQL.
async fn emit_sql(pool: &PgPool, aggregate: &str, n: i64) -> Uuid {
    sqlx::query_scalar(
        "SELECT outbox_emit('order', $1, 'order.updated', jsonb_build_object('n', $2::bigint))",
    )
    .bind(aggregate)
    .bind(n)
    .fetch_one(pool)
    .await
    .unwrap()
}

/// Messages written around `outbox_emit` (issue 46, item 9) are checked as
/// the table would check their row: none is published; what no row could
/// hold is refused and counted, what a row can hold is dead-lettered with
/// the reason; every aggregate's own events before and after arrive in
/// order.
#[tokio::test]
async fn forged_messages_are_never_published_and_their_neighbours_arrive_in_order() {
    let db = wal_db().await;
    let publisher = TestPublisher::new();
    let relay = start(&db, &publisher, config("r1")).await;
    let now = chrono::Utc::now().timestamp_micros();
    let long = |c: &str, n: usize| c.repeat(n);
    // (what, refused (else dead-lettered), the reason's words, content).
    let mut cases: Vec<(&str, bool, &str, Vec<u8>)> = Vec::new();
    let mut forged = Vec::new();
    let mut add = |what, refused, words, aggregate: &str, build: &dyn Fn(Uuid, &str) -> Vec<u8>| {
        let id = Uuid::now_v7();
        forged.push(id);
        cases.push((what, refused, words, build(id, aggregate)));
    };
    let ok = r#"{"n": 99}"#;
    add(
        "aggregate type of 300 characters",
        true,
        "",
        "f-type",
        &|id, a| message(id, now, &long("t", 300), a, "x", None, "{}", ok).into_bytes(),
    );
    add(
        "event type of 101 two-byte characters",
        true,
        "",
        "f-kind",
        &|id, a| message(id, now, "order", a, &long("é", 101), None, "{}", ok).into_bytes(),
    );
    add(
        "topic of 1,000 characters",
        true,
        "",
        "f-topic",
        &|id, a| message(id, now, "order", a, "x", Some(&long("q", 1_000)), "{}", ok).into_bytes(),
    );
    add("a NUL in the event type", true, "", "f-nul", &|id, a| {
        message(id, now, "order", a, "x\0y", None, "{}", ok).into_bytes()
    });
    add("payload not JSON", true, "", "f-text", &|id, a| {
        message(id, now, "order", a, "x", None, "{}", "not json").into_bytes()
    });
    add("payload with \\u0000", true, "", "f-u0", &|id, a| {
        message(id, now, "order", a, "x", None, "{}", r#"{"s": "\u0000"}"#).into_bytes()
    });
    add("payload beyond numeric", true, "", "f-num", &|id, a| {
        message(id, now, "order", a, "x", None, "{}", "[1e131072]").into_bytes()
    });
    add("not UTF-8", true, "", "f-utf8", &|id, a| {
        let mut m = message(id, now, "order", a, "x", None, "{}", ok).into_bytes();
        m.extend_from_slice(b"\xff\xfe");
        m
    });
    add("not outbox_emit's format", true, "", "f-format", &|_, _| {
        b"hello from somebody else".to_vec()
    });
    add(
        "headers an array",
        false,
        "not a JSON object",
        "f-heads",
        &|id, a| message(id, now, "order", a, "x", None, "[1, 2]", ok).into_bytes(),
    );
    add(
        "created_at in 1969",
        false,
        "created_at",
        "f-1969",
        &|id, a| message(id, -1_000_000, "order", a, "x", None, "{}", ok).into_bytes(),
    );
    add(
        "created_at 0 (1970)",
        false,
        "created_at",
        "f-1970",
        &|id, a| message(id, 0, "order", a, "x", None, "{}", ok).into_bytes(),
    );
    add(
        "created_at in 2200",
        false,
        "created_at",
        "f-2200",
        &|id, a| message(id, 7_258_118_400_000_000, "order", a, "x", None, "{}", ok).into_bytes(),
    );
    let aggregates = [
        "f-type", "f-kind", "f-topic", "f-nul", "f-text", "f-u0", "f-num", "f-utf8", "f-format",
        "f-heads", "f-1969", "f-1970", "f-2200",
    ];
    let mut expected = Vec::new();
    for (aggregate, (what, _, _, content)) in aggregates.iter().zip(&cases) {
        // Before and after, each committed on its own; the forged message
        // in a transaction of its own between them.
        expected.push(emit_sql(&db.pool, aggregate, 1).await);
        forge(&db.pool, content).await;
        expected.push(emit_sql(&db.pool, aggregate, 2).await);
        eprintln!("forged: {what}");
    }
    let refused = cases.iter().filter(|c| c.1).count() as u64;
    let dead = cases.len() as i64 - refused as i64;
    wait_until(
        "the events around the forged ones delivered",
        LONG,
        || async { publisher.delivered_count() >= expected.len() },
    )
    .await;
    wait_until("the storable ones dead-lettered", LONG, || async {
        scalar(&db.pool, "SELECT count(*) FROM outbox_dead_letters").await == dead
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(check("", &expected, &publisher), 0, "in order, once each");
    let delivered: std::collections::HashSet<Uuid> =
        publisher.deliveries().iter().map(|e| e.id).collect();
    for (id, (what, ..)) in forged.iter().zip(&cases) {
        assert!(!delivered.contains(id), "{what}: published");
    }
    let stats = relay.stats();
    assert_eq!(stats.refused_messages, refused, "{stats:?}");
    assert_eq!(stats.dead_lettered, dead as u64, "{stats:?}");
    for (id, (what, is_refused, words, _)) in forged.iter().zip(&cases) {
        let row: Option<(String, sqlx::types::JsonValue, String)> = sqlx::query_as(
            "SELECT last_error, headers, payload::text FROM outbox_dead_letters WHERE id = $1",
        )
        .bind(id)
        .fetch_optional(&db.pool)
        .await
        .unwrap();
        match row {
            None => assert!(is_refused, "{what}: not dead-lettered"),
            Some((reason, headers, payload)) => {
                assert!(!is_refused, "{what}: stored");
                assert!(reason.contains(words), "{what}: {reason}");
                assert_eq!(headers, serde_json::json!({}), "{what}");
                assert_eq!(payload, ok, "{what}");
            }
        }
    }
    // The slot moved past all of it.
    wait_until("the slot confirmed past every message", LONG, || async {
        slot_lag(&db.pool).await < 1_000
    })
    .await;
    relay.shutdown().await.unwrap();
}

/// Whatever `::jsonb` accepts as a payload the relay publishes, whatever
/// it refuses the relay refuses: the two agree at numeric's and the
/// escapes' edges (PostgreSQL 15).
#[tokio::test]
async fn the_relay_admits_exactly_the_payloads_jsonb_accepts() {
    let db = wal_db().await;
    let publisher = TestPublisher::new();
    let relay = start(&db, &publisher, config("r1")).await;
    let now = chrono::Utc::now().timestamp_micros();
    let candidates: Vec<String> = [
        r#""\u0000""#,
        r#""\\u0000""#,
        r#""\ud800""#,
        r#""\udc00""#,
        r#""\ud800\udc00""#,
        r#""\ud800x""#,
        "1e1000",
        "1e131071",
        "1e131072",
        "1e-16383",
        "1e-16384",
        "1.5e-16383",
        "0.00001e-16378",
        "0.00001e-16379",
        "0.0e16383",
        "0e1073741822",
        "0e1073741823",
        "-0e-1073741822",
        "123456789012345678901234567890",
        "[1e400, -1.5E+3, 0, -0.0]",
    ]
    .iter()
    .map(|s| s.to_string())
    .chain([
        format!("1{}", "0".repeat(131_071)),
        format!("1{}", "0".repeat(131_072)),
        format!("0.{}", "0".repeat(16_383)),
        format!("0.{}", "0".repeat(16_384)),
    ])
    .collect();
    // (payload, its forged message's id, whether `::jsonb` accepts it).
    let mut forged = Vec::new();
    for (i, payload) in candidates.iter().enumerate() {
        let jsonb = sqlx::query("SELECT $1::jsonb")
            .bind(payload)
            .execute(&db.pool)
            .await
            .is_ok();
        let id = Uuid::now_v7();
        let aggregate = format!("j{i}");
        forge(
            &db.pool,
            message(id, now, "order", &aggregate, "x", None, "{}", payload).as_bytes(),
        )
        .await;
        forged.push((payload, id, jsonb));
    }
    // A last event: once it is delivered, every candidate was read.
    let last = emit_sql(&db.pool, "last", 1).await;
    wait_until("the last event delivered", LONG, || async {
        publisher.deliveries().iter().any(|e| e.id == last)
    })
    .await;
    let delivered: std::collections::HashSet<Uuid> =
        publisher.deliveries().iter().map(|e| e.id).collect();
    for (payload, id, jsonb) in &forged {
        let shown: String = payload.chars().take(40).collect();
        assert_eq!(
            delivered.contains(id),
            *jsonb,
            "{shown}: jsonb {} it",
            if *jsonb { "accepts" } else { "refuses" }
        );
    }
    let refused = forged.iter().filter(|f| !f.2).count();
    assert_eq!(relay.stats().refused_messages, refused as u64);
    assert!(refused > 0 && refused < forged.len());
    eprintln!(
        "{} payloads jsonb accepts published, {refused} it refuses refused",
        forged.len() - refused
    );
    relay.shutdown().await.unwrap();
}

/// Two `outbox_emit` calls with one id and different payloads (issue 46,
/// item 10): the table refuses the second row; the relay refuses the
/// second message read before the slot is confirmed, publishes the first,
/// and the aggregate's next event after it. An id reused after a
/// confirmation is the documented limit (docs/producers.md).
#[tokio::test]
async fn a_second_message_with_an_id_already_read_is_refused_and_the_first_published() {
    let db = wal_db().await;
    let id = Uuid::now_v7();
    // In one transaction: read before the slot is confirmed past it, in
    // any timing (two transactions may be confirmed one by one).
    let mut tx = db.pool.begin().await.unwrap();
    for (n, id) in [(1i64, Some(id)), (2, Some(id)), (3, Some(id))] {
        sqlx::query("SELECT outbox_emit('order', 'd', 'order.updated', jsonb_build_object('n', $1::bigint), '{}', NULL, $2)")
            .bind(n)
            .bind(id)
            .execute(&mut *tx)
            .await
            .unwrap();
    }
    tx.commit().await.unwrap();
    let next = emit_sql(&db.pool, "d", 4).await;
    let publisher = TestPublisher::new();
    let relay = start(&db, &publisher, config("r1")).await;
    wait_until("the aggregate's next event delivered", LONG, || async {
        publisher.deliveries().iter().any(|e| e.id == next)
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let got: Vec<(Uuid, i64)> = publisher
        .deliveries()
        .iter()
        .map(|e| (e.id, position(e)))
        .collect();
    assert_eq!(
        got,
        [(id, 1), (next, 4)],
        "the first under the id, then the next"
    );
    assert_eq!(relay.stats().refused_messages, 2);
    relay.shutdown().await.unwrap();
}

/// The procedure docs/operations.md gives ("Who may publish in the WAL
/// mode"): once EXECUTE on `pg_logical_emit_message` is revoked from
/// PUBLIC and granted to the producers' role, a role with no right on the
/// outbox can no longer write a message with the outbox's prefix, neither
/// directly nor through `outbox_emit`; the producers' role still can.
#[tokio::test]
async fn after_the_documented_revoke_a_role_without_rights_cannot_write_messages() {
    let db = wal_db().await;
    let database: String = sqlx::query_scalar("SELECT current_database()::text")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    let (forger, producer) = (format!("forger_{database}"), format!("producer_{database}"));
    for sql in [
        format!("CREATE ROLE {forger} LOGIN"),
        format!("CREATE ROLE {producer} LOGIN"),
        format!("GRANT USAGE ON SCHEMA public TO {producer}"),
    ] {
        sqlx::query(&sql).execute(&db.pool).await.unwrap();
    }
    let as_role = |role: &str| db.url.replacen("postgres@", &format!("{role}@"), 1);
    let forger_pool = PgPool::connect(&as_role(&forger)).await.unwrap();
    let producer_pool = PgPool::connect(&as_role(&producer)).await.unwrap();
    let direct = "SELECT pg_logical_emit_message(true, 'outbox:public', 'forged')::text";
    let through = "SELECT outbox_emit('order', 'a', 'x', '{}')::text";
    let run = |pool: &PgPool, sql: &'static str| {
        let pool = pool.clone();
        async move { sqlx::query(sql).execute(&pool).await.map(|_| ()) }
    };
    // PostgreSQL's default: any role may.
    run(&forger_pool, direct)
        .await
        .expect("PUBLIC holds EXECUTE by default");
    // The procedure, as a superuser.
    for sql in [
        "REVOKE EXECUTE ON FUNCTION pg_logical_emit_message(boolean, text, text), pg_logical_emit_message(boolean, text, bytea) FROM PUBLIC".to_owned(),
        format!("GRANT EXECUTE ON FUNCTION pg_logical_emit_message(boolean, text, text), pg_logical_emit_message(boolean, text, bytea) TO {producer}"),
        // outbox_emit of the WAL mode is the table's INSERT holders' (and
        // whoever is given it): the producers' role is.
        format!("GRANT EXECUTE ON FUNCTION outbox_emit(text, text, text, jsonb, jsonb, text, uuid) TO {producer}"),
    ] {
        sqlx::query(&sql).execute(&db.pool).await.unwrap();
    }
    // Directly, the function itself refuses; through outbox_emit, which
    // the forger may not call at all in the WAL mode, so does outbox_emit.
    for (sql, function) in [
        (direct, "pg_logical_emit_message"),
        (through, "outbox_emit"),
    ] {
        let err = run(&forger_pool, sql).await.unwrap_err().to_string();
        assert!(
            err.contains(&format!("permission denied for function {function}")),
            "{sql}: {err}"
        );
    }
    run(&producer_pool, through)
        .await
        .expect("the producers' role still emits through outbox_emit");
    // The bytea form too.
    let err = sqlx::query("SELECT pg_logical_emit_message(true, 'outbox:public', '\\x00'::bytea)")
        .execute(&forger_pool)
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("permission denied"), "{err}");
}
