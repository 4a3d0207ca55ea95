//! The WAL mode at its edges, on a real PostgreSQL with `wal_level =
//! logical`: a producer's transaction open across the switch back to the
//! table, a relay stopped between the mark and the end of the switch, a
//! mark no switch wrote, a slot dropped before or during the switch, a
//! standby that takes the slot while an aggregate waits in the table, a
//! slot of another schema or of nobody, a non-UTF-8 database. Each ends
//! with every event delivered in order, or with a refusal that names the
//! fix.

mod common;

use std::time::Duration;

use common::logical::{database, logical_cluster};
use common::{event, position, LONG};
use outbox::{
    migrate, DeliveryMode, MigrateOptions, NewEvent, Outbox, Relay, RelayHandle, ReplicationTarget,
    Schema,
};
use outbox_testkit::{assert_delivered_once_in_order, wait_until, Fail, Match, TestPublisher};
use sqlx::{Connection, PgPool};
use uuid::Uuid;

fn slot_of(url: &str) -> String {
    format!("outbox_{}", url.rsplit('/').next().unwrap())
}

fn options(url: &str, mode: DeliveryMode) -> MigrateOptions {
    MigrateOptions {
        mode: Some(mode),
        slot: (mode == DeliveryMode::Wal).then(|| slot_of(url)),
        switch_timeout: Some(Duration::from_secs(30)),
        ..MigrateOptions::default()
    }
}

async fn switch(url: &str, mode: DeliveryMode) -> outbox::MigrationReport {
    let mut conn = sqlx::PgConnection::connect(url).await.unwrap();
    migrate(&mut conn, &Schema::default(), &options(url, mode))
        .await
        .unwrap()
}

async fn wal_db() -> (String, PgPool) {
    let (url, pool) = database(logical_cluster().await).await;
    switch(&url, DeliveryMode::Wal).await;
    (url, pool)
}

async fn start(url: &str, pool: &PgPool, publisher: &TestPublisher, instance: &str) -> RelayHandle {
    Relay::builder(pool.clone(), publisher.clone())
        .config(common::fast_config(instance))
        .replication(ReplicationTarget::from_url(url).unwrap())
        .spawn()
        .await
        .unwrap()
}

async fn scalar(pool: &PgPool, sql: &str) -> i64 {
    sqlx::query_scalar(sql).fetch_one(pool).await.unwrap()
}

async fn slots(pool: &PgPool) -> i64 {
    scalar(
        pool,
        "SELECT count(*) FROM pg_replication_slots WHERE database = current_database()",
    )
    .await
}

fn check(expected: &[Uuid], publisher: &TestPublisher) {
    let got: Vec<(Uuid, String, i64)> = publisher
        .deliveries()
        .iter()
        .map(|e| (e.id, e.aggregate_id.clone(), position(e)))
        .collect();
    let view: Vec<(Uuid, &str, i64)> = got.iter().map(|(i, a, n)| (*i, a.as_str(), *n)).collect();
    assert_delivered_once_in_order("", expected, &view);
}

async fn emit_one(pool: &PgPool, outbox: &Outbox, e: &NewEvent) {
    let mut tx = pool.begin().await.unwrap();
    outbox.enqueue(&mut *tx, e).await.unwrap();
    tx.commit().await.unwrap();
}

/// Drops this database's slot, as a restore or a failover would.
async fn drop_slot(pool: &PgPool) {
    sqlx::query(
        "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots
         WHERE database = current_database()",
    )
    .execute(pool)
    .await
    .unwrap();
}

/// Five rows written by plain table-mode producers, delivered once in
/// order by a relay started after them; the relay.
async fn five_rows_delivered(url: &str, pool: &PgPool) -> RelayHandle {
    let rows: Vec<NewEvent> = (1..=5).map(|n| event("a", n)).collect();
    for e in &rows {
        emit_one(pool, &Outbox::new(), e).await;
    }
    let publisher = TestPublisher::new();
    let relay = start(url, pool, &publisher, "r1").await;
    wait_until("the five rows delivered", LONG, || async {
        publisher.delivered_count() >= 5
    })
    .await;
    check(&rows.iter().map(|e| e.id).collect::<Vec<_>>(), &publisher);
    relay
}

#[tokio::test]
async fn events_committed_by_transactions_open_across_the_switch_back_are_delivered_before_the_tables_next(
) {
    let (url, pool) = wal_db().await;
    let wal = Outbox::new().with_delivery(DeliveryMode::Wal);
    let table = Outbox::new();
    let publisher = TestPublisher::new();
    let relay = start(&url, &pool, &publisher, "r1").await;
    let aggregates = ["a", "b", "c"];
    let mut expected = Vec::new();
    for a in aggregates {
        let e = event(a, 1);
        expected.push(e.id);
        emit_one(&pool, &wal, &e).await;
    }
    // Three producers, each with an event emitted and not yet committed.
    let mut open = Vec::new();
    for a in aggregates {
        let mut tx = pool.begin().await.unwrap();
        let e = event(a, 2);
        expected.push(e.id);
        wal.enqueue(&mut *tx, &e).await.unwrap();
        open.push(tx);
    }
    let mut conn = sqlx::PgConnection::connect(&url).await.unwrap();
    let table_options = options(&url, DeliveryMode::Table);
    let public = Schema::default();
    let switching = migrate(&mut conn, &public, &table_options);
    let producers = async {
        wait_until("the switch begun", LONG, || async {
            scalar(
                &pool,
                "SELECT count(*) FROM outbox_wal WHERE switch_seq_next IS NOT NULL",
            )
            .await
                == 1
        })
        .await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(
            scalar(
                &pool,
                "SELECT count(*) FROM outbox_wal WHERE switch_mark_lsn IS NOT NULL"
            )
            .await,
            0,
            "no mark while a message may still commit: the switch waits"
        );
        for tx in open {
            tx.commit().await.unwrap();
        }
    };
    let (switched, ()) = tokio::join!(switching, producers);
    switched.unwrap();
    // Rows written after the switch come after every earlier event.
    for a in aggregates {
        let e = event(a, 3);
        expected.push(e.id);
        emit_one(&pool, &table, &e).await;
    }
    wait_until("every event delivered", LONG, || async {
        publisher.delivered_count() >= expected.len()
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    check(&expected, &publisher);
    wait_until("the switch ended and the slot dropped", LONG, || async {
        slots(&pool).await == 0
    })
    .await;
    relay.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_switch_whose_older_transaction_stays_open_stops_naming_it_and_resumes_when_run_again() {
    let (url, pool) = wal_db().await;
    let wal = Outbox::new().with_delivery(DeliveryMode::Wal);
    let mut tx = pool.begin().await.unwrap();
    let late = event("a", 1);
    wal.enqueue(&mut *tx, &late).await.unwrap();
    let pid: i32 = sqlx::query_scalar("SELECT pg_backend_pid()")
        .fetch_one(&mut *tx)
        .await
        .unwrap();
    let mut conn = sqlx::PgConnection::connect(&url).await.unwrap();
    let err = migrate(
        &mut conn,
        &Schema::default(),
        &MigrateOptions {
            switch_timeout: Some(Duration::from_millis(500)),
            ..options(&url, DeliveryMode::Table)
        },
    )
    .await
    .unwrap_err()
    .to_string();
    assert!(
        err.contains(&format!("pid {pid}")) && err.contains("outbox migrate --mode table again"),
        "{err}"
    );
    let status = outbox::Status::read(&mut conn, &Schema::default())
        .await
        .unwrap();
    assert!(status.slot.unwrap().switching_to_table, "still in progress");
    tx.commit().await.unwrap();
    let next = event("a", 2);
    emit_one(&pool, &Outbox::new(), &next).await;
    switch(&url, DeliveryMode::Table).await;
    let publisher = TestPublisher::new();
    let relay = start(&url, &pool, &publisher, "r1").await;
    wait_until("both delivered", LONG, || async {
        publisher.delivered_count() >= 2
    })
    .await;
    check(&[late.id, next.id], &publisher);
    wait_until("the slot dropped", LONG, || async {
        slots(&pool).await == 0
    })
    .await;
    relay.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_relay_that_confirmed_the_mark_but_stopped_before_ending_the_switch_ends_it_when_it_starts(
) {
    let (url, pool) = wal_db().await;
    let wal = Outbox::new().with_delivery(DeliveryMode::Wal);
    let publisher = TestPublisher::new();
    let relay = start(&url, &pool, &publisher, "r1").await;
    let first = event("a", 1);
    emit_one(&pool, &wal, &first).await;
    wait_until("delivered", LONG, || async {
        publisher.delivered_count() >= 1
    })
    .await;
    relay.shutdown().await.unwrap();
    switch(&url, DeliveryMode::Table).await;
    // What a relay killed between confirming the mark and ending the
    // switch leaves: the slot confirmed past the mark, the switch pending.
    sqlx::query(
        "SELECT pg_replication_slot_advance(slot_name, pg_current_wal_lsn())
         FROM pg_replication_slots WHERE database = current_database()",
    )
    .execute(&pool)
    .await
    .unwrap();
    let next = event("a", 2);
    emit_one(&pool, &Outbox::new(), &next).await;
    let relay = start(&url, &pool, &publisher, "r2").await;
    wait_until("the row after the switch delivered", LONG, || async {
        publisher.delivered_count() >= 2
    })
    .await;
    check(&[first.id, next.id], &publisher);
    wait_until("the switch ended", LONG, || async {
        slots(&pool).await == 0 && scalar(&pool, "SELECT count(*) FROM outbox_pauses").await == 0
    })
    .await;
    assert!(!relay.is_finished());
    relay.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_mark_that_no_switch_wrote_is_not_obeyed() {
    let (url, pool) = wal_db().await;
    let wal = Outbox::new().with_delivery(DeliveryMode::Wal);
    let publisher = TestPublisher::new();
    let relay = start(&url, &pool, &publisher, "r1").await;
    sqlx::query("SELECT pg_logical_emit_message(true, 'outbox:public', 'switch table')")
        .execute(&pool)
        .await
        .unwrap();
    let after = event("a", 1);
    emit_one(&pool, &wal, &after).await;
    wait_until(
        "the event after the forged mark delivered",
        LONG,
        || async { publisher.delivered_count() >= 1 },
    )
    .await;
    assert_eq!(slots(&pool).await, 1, "the slot is kept");
    assert!(relay.slot().active() && !relay.slot().finished_cleanly());
    let later = event("a", 2);
    emit_one(&pool, &wal, &later).await;
    wait_until("and the next", LONG, || async {
        publisher.delivered_count() >= 2
    })
    .await;
    check(&[after.id, later.id], &publisher);
    relay.shutdown().await.unwrap();
}

#[tokio::test]
async fn switching_back_with_the_slot_gone_ends_at_once_saying_so_and_rows_are_delivered() {
    let (url, pool) = wal_db().await;
    drop_slot(&pool).await;
    let report = switch(&url, DeliveryMode::Table).await;
    assert_eq!(report.mode, DeliveryMode::Table);
    assert_eq!(report.slot, None, "the slot is forgotten");
    assert!(
        report
            .warnings
            .iter()
            .any(|w| w.contains("does not exist") && w.contains(&slot_of(&url))),
        "{:?}",
        report.warnings
    );
    assert_eq!(scalar(&pool, "SELECT count(*) FROM outbox_pauses").await, 0);
    let relay = five_rows_delivered(&url, &pool).await;
    relay.shutdown().await.unwrap();
    // And the WAL mode can be entered again.
    let report = switch(&url, DeliveryMode::Wal).await;
    assert!(report.slot_created);
}

#[tokio::test]
async fn a_slot_dropped_while_the_switch_waits_for_it_ends_the_switch_and_rows_flow() {
    let (url, pool) = wal_db().await;
    switch(&url, DeliveryMode::Table).await;
    drop_slot(&pool).await;
    let relay = five_rows_delivered(&url, &pool).await;
    assert_eq!(scalar(&pool, "SELECT count(*) FROM outbox_wal").await, 0);
    assert!(!relay.is_finished(), "the table relay goes on");
    relay.shutdown().await.unwrap();
    // migrate --mode wal is not refused by a switch nobody can finish.
    let report = switch(&url, DeliveryMode::Wal).await;
    assert_eq!(report.mode, DeliveryMode::Wal);
}

#[tokio::test]
async fn a_wal_mode_relay_whose_slot_is_gone_refuses_to_start_naming_the_way_out() {
    let (url, pool) = wal_db().await;
    drop_slot(&pool).await;
    let err = Relay::builder(pool.clone(), TestPublisher::new())
        .config(common::fast_config("r1"))
        .replication(ReplicationTarget::from_url(&url).unwrap())
        .spawn()
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("does not exist") && err.contains("outbox migrate --mode wal"),
        "{err}"
    );
    // migrate --mode wal creates it again, saying what could not be read.
    let report = switch(&url, DeliveryMode::Wal).await;
    assert!(report.slot_created, "{report:?}");
    assert!(
        report.warnings.iter().any(|w| w.contains("created again")),
        "{:?}",
        report.warnings
    );
}

#[tokio::test]
async fn a_standby_after_a_clean_switch_stops_reading_without_an_error() {
    let (url, pool) = wal_db().await;
    let publisher = TestPublisher::new();
    let first = start(&url, &pool, &publisher, "r1").await;
    let second = start(&url, &pool, &publisher, "r2").await;
    assert!(first.slot().active() && !second.slot().active());
    let e = event("a", 1);
    emit_one(&pool, &Outbox::new().with_delivery(DeliveryMode::Wal), &e).await;
    switch(&url, DeliveryMode::Table).await;
    wait_until("the switch ended", LONG, || async {
        slots(&pool).await == 0
    })
    .await;
    wait_until("the standby sees it", LONG, || async {
        second.slot().finished_cleanly()
    })
    .await;
    assert!(!first.is_finished() && !second.is_finished());
    let row = event("a", 2);
    emit_one(&pool, &Outbox::new(), &row).await;
    wait_until("the row delivered", LONG, || async {
        publisher.delivered_count() >= 2
    })
    .await;
    check(&[e.id, row.id], &publisher);
    first.shutdown().await.unwrap();
    second.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_standby_that_takes_the_slot_keeps_an_aggregate_behind_its_event_waiting_in_the_table() {
    let (url, pool) = wal_db().await;
    let wal = Outbox::new().with_delivery(DeliveryMode::Wal);
    let publisher = TestPublisher::new();
    let mut config = common::fast_config("r1");
    // The table's retry of e1 comes long after the standby has read e2.
    config.backoff_base_ms = 3_000;
    config.backoff_max_ms = 3_000;
    let first = Relay::builder(pool.clone(), publisher.clone())
        .config(config.clone())
        .replication(ReplicationTarget::from_url(&url).unwrap())
        .spawn()
        .await
        .unwrap();
    config.instance_id = Some("r2".to_owned());
    let standby = Relay::builder(pool.clone(), publisher.clone())
        .config(config)
        .replication(ReplicationTarget::from_url(&url).unwrap())
        .spawn()
        .await
        .unwrap();
    let e1 = event("a", 1);
    publisher.fail(Match::Id(e1.id), Fail::Retry, Some(1));
    emit_one(&pool, &wal, &e1).await;
    wait_until("e1 set aside in the table", LONG, || async {
        scalar(&pool, "SELECT count(*) FROM outbox_events").await == 1
    })
    .await;
    first.abort();
    wait_until("the standby reads the slot", LONG, || async {
        standby.slot().active()
    })
    .await;
    let e2 = event("a", 2);
    emit_one(&pool, &wal, &e2).await;
    wait_until("both delivered", LONG, || async {
        publisher.deliveries().iter().any(|e| e.id == e2.id)
            && publisher.deliveries().iter().any(|e| e.id == e1.id)
    })
    .await;
    check(&[e1.id, e2.id], &publisher);
    standby.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_slot_of_another_schema_or_of_nobody_is_refused_and_a_schema_keeps_its_slot() {
    let (url, pool) = wal_db().await;
    let mut conn = sqlx::PgConnection::connect(&url).await.unwrap();
    let other = Schema::new("sh2").unwrap();
    let err = migrate(
        &mut conn,
        &other,
        &MigrateOptions {
            mode: Some(DeliveryMode::Wal),
            slot: Some(slot_of(&url)),
            ..MigrateOptions::default()
        },
    )
    .await
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("serves schema public") || err.contains("created for schema public"),
        "{err}"
    );
    // A slot the outbox did not create: refused, unless adopted.
    sqlx::query("SELECT pg_create_logical_replication_slot('someone_elses', 'pgoutput')")
        .execute(&pool)
        .await
        .unwrap();
    let adopt = |adopt_slot| MigrateOptions {
        mode: Some(DeliveryMode::Wal),
        slot: Some("someone_elses".to_owned()),
        adopt_slot,
        ..MigrateOptions::default()
    };
    let err = migrate(&mut conn, &other, &adopt(false))
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("--adopt-slot"), "{err}");
    let report = migrate(&mut conn, &other, &adopt(true)).await.unwrap();
    assert_eq!(report.slot.as_deref(), Some("someone_elses"));
    // Moving a schema in the WAL mode to a new slot would strand the old.
    let err = migrate(
        &mut conn,
        &Schema::default(),
        &MigrateOptions {
            mode: Some(DeliveryMode::Wal),
            slot: Some("newslot_b".to_owned()),
            ..MigrateOptions::default()
        },
    )
    .await
    .unwrap_err()
    .to_string();
    assert!(
        err.contains(&slot_of(&url)) && err.contains("--mode table"),
        "{err}"
    );
    // Without --slot, the schema's own slot is kept.
    let report = migrate(
        &mut conn,
        &Schema::default(),
        &MigrateOptions {
            mode: Some(DeliveryMode::Wal),
            ..MigrateOptions::default()
        },
    )
    .await
    .unwrap();
    assert_eq!(report.slot, Some(slot_of(&url)));
    assert_eq!(
        scalar(
            &pool,
            "SELECT count(*) FROM pg_replication_slots WHERE slot_name = 'newslot_b'"
        )
        .await,
        0
    );
}

#[tokio::test]
async fn the_default_slot_names_the_database_when_another_database_has_the_name() {
    let cluster = logical_cluster().await;
    let (url_a, _a) = database(cluster).await;
    let (url_b, _b) = database(cluster).await;
    let wal = MigrateOptions {
        mode: Some(DeliveryMode::Wal),
        ..MigrateOptions::default()
    };
    let schema = Schema::new("shared_name").unwrap();
    let mut a = sqlx::PgConnection::connect(&url_a).await.unwrap();
    let first = migrate(&mut a, &schema, &wal).await.unwrap();
    assert_eq!(first.slot.as_deref(), Some("outbox_shared_name"));
    let mut b = sqlx::PgConnection::connect(&url_b).await.unwrap();
    let second = migrate(&mut b, &schema, &wal).await.unwrap();
    let db_b = url_b.rsplit('/').next().unwrap();
    assert_eq!(
        second.slot,
        Some(format!("outbox_{db_b}_shared_name")),
        "the second database's schema gets a slot of its own"
    );
    for slot in [first.slot.unwrap(), second.slot.unwrap()] {
        sqlx::query("SELECT pg_drop_replication_slot($1)")
            .bind(slot)
            .execute(&mut a)
            .await
            .unwrap();
    }
}

#[tokio::test]
async fn a_database_not_encoded_in_utf8_is_refused_naming_its_encoding_and_the_fix() {
    let cluster = logical_cluster().await;
    let mut admin = sqlx::PgConnection::connect(&cluster.url()).await.unwrap();
    let name = format!("latin_{:08x}", rand::random::<u32>());
    sqlx::query(&format!(
        "CREATE DATABASE {name} ENCODING 'LATIN1' LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0"
    ))
    .execute(&mut admin)
    .await
    .unwrap();
    let url = cluster.url_for(&name);
    let mut conn = sqlx::PgConnection::connect(&url).await.unwrap();
    let err = migrate(
        &mut conn,
        &Schema::default(),
        &MigrateOptions {
            mode: Some(DeliveryMode::Wal),
            ..MigrateOptions::default()
        },
    )
    .await
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("LATIN1") && err.contains("table mode"),
        "{err}"
    );
    let exists: bool = sqlx::query_scalar("SELECT to_regclass('public.outbox_wal') IS NOT NULL")
        .fetch_one(&mut conn)
        .await
        .unwrap();
    assert!(!exists, "nothing is created");
    // The table mode serves it, and converts to UTF-8 for the relay.
    migrate(&mut conn, &Schema::default(), &MigrateOptions::default())
        .await
        .unwrap();
}

#[tokio::test]
async fn only_roles_that_may_insert_into_the_table_may_emit_in_the_wal_mode() {
    let cluster = logical_cluster().await;
    let (url, pool) = database(cluster).await;
    let mut conn = sqlx::PgConnection::connect(&url).await.unwrap();
    migrate(&mut conn, &Schema::default(), &MigrateOptions::default())
        .await
        .unwrap();
    let suffix = url.rsplit('/').next().unwrap().to_owned();
    let (stranger, producer) = (format!("stranger_{suffix}"), format!("producer_{suffix}"));
    for sql in [
        format!("CREATE ROLE {stranger} LOGIN"),
        format!("CREATE ROLE {producer} LOGIN"),
        format!("GRANT INSERT ON outbox_events TO {producer}"),
        format!("GRANT USAGE ON ALL SEQUENCES IN SCHEMA public TO {producer}"),
    ] {
        sqlx::query(&sql).execute(&pool).await.unwrap();
    }
    migrate(
        &mut conn,
        &Schema::default(),
        &options(&url, DeliveryMode::Wal),
    )
    .await
    .unwrap();
    // postgres://postgres@host:port/db, as another role.
    let as_role = |role: String| {
        let url = url.replacen("://postgres@", &format!("://{role}@"), 1);
        async move { sqlx::PgConnection::connect(&url).await.unwrap() }
    };
    let emit = "SELECT outbox_emit('order', 'a', 'order.placed', '{}')";
    let mut s = as_role(stranger.clone()).await;
    let err = sqlx::query(emit).execute(&mut s).await.unwrap_err();
    let code = err.as_database_error().and_then(|e| e.code()).unwrap();
    assert_eq!(code, "42501", "permission denied: {err}");
    let mut p = as_role(producer.clone()).await;
    sqlx::query(emit).execute(&mut p).await.unwrap();
    sqlx::query(
        "INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload)
         VALUES ('order', 'a', 'order.placed', '{}')",
    )
    .execute(&mut p)
    .await
    .unwrap();
    drop((s, p));
    // Dropping the slot lets the switch back end at once.
    drop_slot(&pool).await;
    switch(&url, DeliveryMode::Table).await;
    // Back in the table mode: the INSERT inside checks, as it always did.
    let mut s = as_role(stranger).await;
    let err = sqlx::query(emit).execute(&mut s).await.unwrap_err();
    assert!(err.to_string().contains("outbox_events"), "{err}");
    let mut p = as_role(producer).await;
    sqlx::query(emit).execute(&mut p).await.unwrap();
}

fn invoice(agg: &str, n: i64) -> NewEvent {
    NewEvent::json(
        "invoice",
        agg,
        "invoice.issued",
        serde_json::json!({ "n": n }),
    )
}

#[tokio::test]
async fn a_paused_aggregate_type_waits_in_the_wal_mode_and_is_delivered_in_order_after_resume() {
    let (url, pool) = wal_db().await;
    let wal = Outbox::new().with_delivery(DeliveryMode::Wal);
    let publisher = TestPublisher::new();
    let relay = start(&url, &pool, &publisher, "r1").await;
    sqlx::query("INSERT INTO outbox_pauses (aggregate_type) VALUES ('order')")
        .execute(&pool)
        .await
        .unwrap();
    let mut expected = Vec::new();
    for n in 1..=20 {
        let events = vec![event("o-1", n), event("o-2", n), invoice("i-1", n)];
        expected.extend(events.iter().map(|e| e.id));
        let mut tx = pool.begin().await.unwrap();
        wal.enqueue_many(&mut *tx, &events).await.unwrap();
        tx.commit().await.unwrap();
    }
    wait_until("the invoices delivered", LONG, || async {
        publisher.delivered_count() >= 20
    })
    .await;
    let late = invoice("i-2", 1);
    expected.push(late.id);
    emit_one(&pool, &wal, &late).await;
    wait_until("the late invoice delivered", LONG, || async {
        publisher.deliveries().iter().any(|e| e.id == late.id)
    })
    .await;
    assert!(
        publisher
            .deliveries()
            .iter()
            .all(|e| e.aggregate_type == "invoice"),
        "a paused aggregate type was delivered"
    );
    sqlx::query("DELETE FROM outbox_pauses WHERE aggregate_type = 'order'")
        .execute(&pool)
        .await
        .unwrap();
    // Emitted after the resume: behind its aggregate's held events.
    let after = event("o-1", 21);
    expected.push(after.id);
    emit_one(&pool, &wal, &after).await;
    wait_until("everything delivered after resume", LONG, || async {
        publisher.delivered_count() >= expected.len()
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    check(&expected, &publisher);
    relay.shutdown().await.unwrap();
}

#[tokio::test]
async fn pausing_the_whole_outbox_holds_the_wal_stream_until_resumed() {
    let (url, pool) = wal_db().await;
    let wal = Outbox::new().with_delivery(DeliveryMode::Wal);
    let publisher = TestPublisher::new();
    let relay = start(&url, &pool, &publisher, "r1").await;
    let first = event("a", 1);
    emit_one(&pool, &wal, &first).await;
    wait_until("delivered before the pause", LONG, || async {
        publisher.delivered_count() >= 1
    })
    .await;
    sqlx::query("INSERT INTO outbox_pauses (aggregate_type, paused_by) VALUES (NULL, 'test')")
        .execute(&pool)
        .await
        .unwrap();
    let mut expected = vec![first.id];
    for n in 2..=6 {
        let e = event(if n % 2 == 0 { "a" } else { "b" }, n);
        expected.push(e.id);
        emit_one(&pool, &wal, &e).await;
    }
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert_eq!(
        publisher.delivered_count(),
        1,
        "nothing delivered while paused"
    );
    sqlx::query("DELETE FROM outbox_pauses")
        .execute(&pool)
        .await
        .unwrap();
    wait_until("everything delivered after resume", LONG, || async {
        publisher.delivered_count() >= expected.len()
    })
    .await;
    check(&expected, &publisher);
    relay.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_pause_holds_every_event_that_commits_after_it_even_before_its_notification_arrives() {
    let (url, pool) = wal_db().await;
    let publisher = TestPublisher::new();
    let relay = start(&url, &pool, &publisher, "r1").await;
    let first = event("a", 1);
    emit_one(
        &pool,
        &Outbox::new().with_delivery(DeliveryMode::Wal),
        &first,
    )
    .await;
    wait_until("delivered before the pause", LONG, || async {
        publisher.delivered_count() >= 1
    })
    .await;
    // The pause and the events commit together, ten times: the relay reads
    // them from the slot at once, with the pause's NOTIFY still on its way.
    let mut expected = vec![first.id];
    for n in 2..=11 {
        let e = event("a", n);
        expected.push(e.id);
        let mut tx = pool.begin().await.unwrap();
        sqlx::query(
            "INSERT INTO outbox_pauses (aggregate_type, paused_by) VALUES (NULL, 'test')
             ON CONFLICT DO NOTHING",
        )
        .execute(&mut *tx)
        .await
        .unwrap();
        sqlx::query("SELECT outbox_emit($1, $2, $3, $4::jsonb, '{}', NULL, $5)")
            .bind(&e.aggregate_type)
            .bind(&e.aggregate_id)
            .bind(&e.event_type)
            .bind(e.payload.to_string())
            .bind(e.id)
            .execute(&mut *tx)
            .await
            .unwrap();
        tx.commit().await.unwrap();
    }
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert_eq!(
        publisher.delivered_count(),
        1,
        "nothing that committed with the pause is delivered while it holds"
    );
    sqlx::query("DELETE FROM outbox_pauses")
        .execute(&pool)
        .await
        .unwrap();
    wait_until("everything delivered after resume", LONG, || async {
        publisher.delivered_count() >= expected.len()
    })
    .await;
    check(&expected, &publisher);
    relay.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_reader_whose_session_ended_sets_nothing_aside_once_another_reader_holds_the_slot() {
    let (url, pool) = wal_db().await;
    let wal = Outbox::new().with_delivery(DeliveryMode::Wal);
    // The first reader's publish of e1 is slow, then fails.
    let slow = TestPublisher::new();
    slow.set_latency(Duration::from_secs(3));
    let e1 = event("x", 1);
    slow.fail(Match::Id(e1.id), Fail::Retry, None);
    let first = start(&url, &pool, &slow, "r1").await;
    emit_one(&pool, &wal, &e1).await;
    wait_until("e1 being published", LONG, || async { slow.calls() >= 1 }).await;
    // Its session ends meanwhile: the server frees the slot.
    sqlx::query(
        "SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots
         WHERE database = current_database()",
    )
    .execute(&pool)
    .await
    .unwrap();
    let healthy = TestPublisher::new();
    let second = start(&url, &pool, &healthy, "r2").await;
    wait_until("the second reader holds the slot", LONG, || async {
        second.slot().active()
    })
    .await;
    let e2 = event("x", 2);
    emit_one(&pool, &wal, &e2).await;
    wait_until("e1 and e2 delivered by the second", LONG, || async {
        healthy.delivered_count() >= 2
    })
    .await;
    // The first reader's publish fails now: its set-aside is fenced out.
    wait_until("the first reader's publish answered", LONG, || async {
        slow.attempts().iter().any(|a| a.id == e1.id)
    })
    .await;
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    assert_eq!(
        scalar(&pool, "SELECT count(*) FROM outbox_events").await,
        0,
        "a reader that no longer holds the slot stored nothing"
    );
    check(&[e1.id, e2.id], &healthy);
    first.abort();
    second.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_message_written_outside_a_transaction_is_refused_and_counted_not_dropped_silently() {
    let (url, pool) = wal_db().await;
    let publisher = TestPublisher::new();
    let relay = start(&url, &pool, &publisher, "r1").await;
    sqlx::query("SELECT pg_logical_emit_message(false, 'outbox:public', 'not an event')")
        .execute(&pool)
        .await
        .unwrap();
    let e = event("a", 1);
    emit_one(&pool, &Outbox::new().with_delivery(DeliveryMode::Wal), &e).await;
    wait_until("the event delivered", LONG, || async {
        publisher.delivered_count() >= 1
    })
    .await;
    wait_until("the refusal counted", LONG, || async {
        relay.stats().refused_messages == 1
    })
    .await;
    check(&[e.id], &publisher);
    relay.shutdown().await.unwrap();
}

#[tokio::test]
async fn an_operators_pause_in_force_at_the_switch_holds_through_it_and_is_given_back() {
    let (url, pool) = wal_db().await;
    let wal = Outbox::new().with_delivery(DeliveryMode::Wal);
    sqlx::query("INSERT INTO outbox_pauses (aggregate_type, paused_by) VALUES (NULL, 'operator')")
        .execute(&pool)
        .await
        .unwrap();
    let before = event("a", 1);
    emit_one(&pool, &wal, &before).await;
    switch(&url, DeliveryMode::Table).await;
    // While the slot is read, the pause is the switch's: no Resume (the
    // console's leaves the switch's pause alone) lifts it before then.
    let during: String =
        sqlx::query_scalar("SELECT paused_by FROM outbox_pauses WHERE aggregate_type IS NULL")
            .fetch_one(&pool)
            .await
            .unwrap();
    assert!(
        during.starts_with("outbox migrate --mode table:") && during.ends_with("[kept: operator]"),
        "{during}"
    );
    let after = event("a", 2);
    emit_one(&pool, &Outbox::new(), &after).await;
    let publisher = TestPublisher::new();
    let relay = start(&url, &pool, &publisher, "r1").await;
    wait_until("the switch ended", LONG, || async {
        slots(&pool).await == 0
    })
    .await;
    let by: Vec<Option<String>> =
        sqlx::query_scalar("SELECT paused_by FROM outbox_pauses WHERE aggregate_type IS NULL")
            .fetch_all(&pool)
            .await
            .unwrap()
            .into_iter()
            .map(Some)
            .collect();
    assert_eq!(
        by,
        vec![Some("operator".to_owned())],
        "the operator's pause, as it was"
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        publisher.delivered_count(),
        0,
        "nothing delivered while paused"
    );
    sqlx::query("DELETE FROM outbox_pauses")
        .execute(&pool)
        .await
        .unwrap();
    wait_until("both delivered after the resume", LONG, || async {
        publisher.delivered_count() >= 2
    })
    .await;
    check(&[before.id, after.id], &publisher);
    relay.shutdown().await.unwrap();
}

/// Collects the relay's outage reports.
#[derive(Default)]
struct Outages(std::sync::Mutex<Vec<(outbox::OutageKind, String)>>);

impl outbox::RelayObserver for Outages {
    fn on_outage(&self, kind: outbox::OutageKind, error: &str) {
        self.0.lock().unwrap().push((kind, error.to_owned()));
    }
}

#[tokio::test]
async fn a_set_aside_the_table_refuses_holds_the_slot_names_the_cause_and_its_fix_and_is_delivered_once_fixed(
) {
    let (url, pool) = wal_db().await;
    let wal = Outbox::new().with_delivery(DeliveryMode::Wal);
    // A constraint added by hand refuses the rows of aggregate "poison".
    sqlx::query(
        "ALTER TABLE outbox_events ADD CONSTRAINT refuse_poison CHECK (aggregate_id <> 'poison') NOT VALID",
    )
    .execute(&pool)
    .await
    .unwrap();
    let publisher = TestPublisher::new();
    let e1 = event("poison", 1);
    publisher.fail(Match::Id(e1.id), Fail::Retry, Some(1));
    let outages = std::sync::Arc::new(Outages::default());
    let relay = Relay::builder(pool.clone(), publisher.clone())
        .config(common::fast_config("r1"))
        .replication(ReplicationTarget::from_url(&url).unwrap())
        .observer(outages.clone())
        .spawn()
        .await
        .unwrap();
    emit_one(&pool, &wal, &e1).await;
    wait_until("the refusal reported with its fix", LONG, || async {
        outages.0.lock().unwrap().iter().any(|(kind, error)| {
            *kind == outbox::OutageKind::Database
                && error.contains("refuse_poison")
                && error.contains("a constraint of outbox_events refuses the rows")
        })
    })
    .await;
    let e2 = event("other", 1);
    emit_one(&pool, &wal, &e2).await;
    // Nothing is confirmed past the batch meanwhile: e2, behind it in the
    // slot, is not published, and the slot keeps both.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        !publisher.deliveries().iter().any(|e| e.id == e2.id),
        "nothing behind the refused batch is published"
    );
    assert_eq!(scalar(&pool, "SELECT count(*) FROM outbox_events").await, 0);
    sqlx::query("ALTER TABLE outbox_events DROP CONSTRAINT refuse_poison")
        .execute(&pool)
        .await
        .unwrap();
    wait_until("both delivered once the cause is fixed", LONG, || async {
        let d = publisher.deliveries();
        d.iter().any(|e| e.id == e1.id) && d.iter().any(|e| e.id == e2.id)
    })
    .await;
    check(&[e1.id, e2.id], &publisher);
    relay.shutdown().await.unwrap();
}
