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
