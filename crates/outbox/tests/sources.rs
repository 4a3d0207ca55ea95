//! One relay for many schemas: every source's events delivered in order
//! per aggregate; an idle source goes dormant and a plain-SQL commit wakes
//! it; a schema migrated while the relay runs is served without a rescan
//! tick; a dropped one is let go while the others go on.

mod common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{execute, fast_config};
use outbox::sources::{
    SchemaSelector, SourceDef, SourceObserver, SourceState, Sources, SourcesHandle, SourcesSettings,
};
use outbox::{MigrateOptions, RelayObserver, Schema};
use outbox_testkit::postgres::migrated_test_db;
use outbox_testkit::{wait_until, TestPublisher};
use sqlx::PgPool;

const LONG: Duration = Duration::from_secs(30);

async fn migrate(pool: &PgPool, name: &str) {
    let mut conn = pool.acquire().await.unwrap();
    outbox::migrate(
        &mut conn,
        &Schema::new(name).unwrap(),
        &MigrateOptions::default(),
    )
    .await
    .unwrap();
}

async fn insert(pool: &PgPool, schema: &str, aggregate: &str, n: i64) {
    execute(
        pool,
        &format!(
            "INSERT INTO {schema}.outbox_events (aggregate_type, aggregate_id, event_type, payload)
             VALUES ('order', '{aggregate}', 'order.step', '{{\"n\": {n}}}')"
        ),
    )
    .await;
}

#[derive(Default)]
struct Seen {
    added: Mutex<Vec<String>>,
    removed: Mutex<Vec<String>>,
}

impl SourceObserver for Seen {
    fn source_added(&self, name: &str) -> Option<Arc<dyn RelayObserver>> {
        self.added.lock().unwrap().push(name.to_owned());
        None
    }
    fn source_removed(&self, name: &str) {
        self.removed.lock().unwrap().push(name.to_owned());
    }
}

async fn start(pool: &PgPool, publisher: &TestPublisher, seen: Arc<Seen>) -> SourcesHandle {
    start_with(
        pool,
        publisher,
        seen,
        fast_config("sources-test"),
        Duration::from_secs(5),
    )
    .await
}

async fn start_with(
    pool: &PgPool,
    publisher: &TestPublisher,
    seen: Arc<Seen>,
    config: outbox::RelayConfig,
    check_interval: Duration,
) -> SourcesHandle {
    let def = |name: &str, selector| SourceDef {
        name: name.to_owned(),
        database: "db".to_owned(),
        pool: pool.clone(),
        selector,
        config: config.clone(),
        publisher: Arc::new(publisher.clone()),
        replication: None,
    };
    Sources::builder()
        .source(def("main", SchemaSelector::Schema(Schema::default())))
        .source(def(
            "tenants",
            SchemaSelector::Pattern("tenant_*".to_owned()),
        ))
        .settings(SourcesSettings {
            check_interval,
            rescan_interval: Duration::from_secs(3_600),
            dormant_after: Duration::from_millis(300),
            instance_id: Some("sources-test".to_owned()),
        })
        .observer(seen)
        .spawn()
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_schemas_events_arrive_in_order_and_idle_sources_go_dormant_until_a_commit_wakes_them(
) {
    let (_db, pool) = migrated_test_db().await;
    for t in ["tenant_a", "tenant_b", "tenant_c"] {
        migrate(&pool, t).await;
    }
    execute(&pool, "CREATE SCHEMA tenant_without_tables").await;
    // A backlog before the relay starts: found by the first check.
    for n in 1..=30 {
        for (schema, agg) in [("public", "p1"), ("tenant_a", "a1"), ("tenant_b", "b1")] {
            insert(&pool, schema, agg, n).await;
        }
    }
    let publisher = TestPublisher::new();
    let seen = Arc::new(Seen::default());
    let relay = start(&pool, &publisher, seen.clone()).await;
    wait_until("the backlog is delivered", LONG, || async {
        publisher.delivered_count() >= 90
    })
    .await;
    let mut names: Vec<String> = relay.statuses().iter().map(|s| s.name.clone()).collect();
    names.sort();
    assert_eq!(
        names,
        [
            "main",
            "tenants/tenant_a",
            "tenants/tenant_b",
            "tenants/tenant_c"
        ],
        "a schema without the outbox tables is not a source"
    );
    wait_until("every source is dormant", LONG, || async {
        relay
            .statuses()
            .iter()
            .all(|s| s.state == SourceState::Dormant && s.healthy())
    })
    .await;
    // Dormant sources do not renew their leases: past one lease, none is
    // held.
    tokio::time::sleep(Duration::from_millis(1_500 + 500)).await;
    let held: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM tenant_a.outbox_partitions WHERE lease_until > now()",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(held, 0, "a dormant source renews no lease");

    // A commit into a dormant schema wakes it well before the check would.
    for (i, schema) in ["tenant_c", "public", "tenant_b"].iter().enumerate() {
        let before = publisher.delivered_count();
        let started = Instant::now();
        insert(&pool, schema, &format!("late{i}"), 1).await;
        wait_until("the late event is delivered", LONG, || async {
            publisher.delivered_count() > before
        })
        .await;
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "{schema}: delivered after {:?}, not by the wake-up",
            started.elapsed()
        );
        wait_until("dormant again", LONG, || async {
            relay
                .statuses()
                .iter()
                .all(|s| s.state == SourceState::Dormant)
        })
        .await;
    }
    // Per aggregate, in order.
    let deliveries = publisher.deliveries();
    for agg in ["p1", "a1", "b1"] {
        let ns: Vec<i64> = deliveries
            .iter()
            .filter(|e| e.aggregate_id == agg)
            .map(common::position)
            .collect();
        let mut first = ns.clone();
        first.dedup();
        assert_eq!(first, (1..=30).collect::<Vec<_>>(), "{agg} in order");
    }
    relay.shutdown_within(LONG).await.unwrap();
    assert_eq!(seen.added.lock().unwrap().len(), 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schema_migrated_while_running_is_served_and_a_dropped_one_is_let_go() {
    let (_db, pool) = migrated_test_db().await;
    migrate(&pool, "tenant_a").await;
    migrate(&pool, "tenant_b").await;
    let publisher = TestPublisher::new();
    let seen = Arc::new(Seen::default());
    let relay = start_with(
        &pool,
        &publisher,
        seen.clone(),
        fast_config("sources-test"),
        Duration::from_millis(500),
    )
    .await;
    wait_until("three sources", LONG, || async {
        relay.statuses().len() == 3
    })
    .await;

    // `outbox migrate` announces the schema: served long before the hourly
    // rescan.
    migrate(&pool, "tenant_new").await;
    wait_until(
        "the new schema is a source",
        Duration::from_secs(5),
        || async {
            relay
                .statuses()
                .iter()
                .any(|s| s.name == "tenants/tenant_new")
        },
    )
    .await;
    insert(&pool, "tenant_new", "n1", 1).await;
    wait_until("its event is delivered", LONG, || async {
        publisher
            .deliveries()
            .iter()
            .any(|e| e.aggregate_id == "n1")
    })
    .await;

    // A dropped schema is let go as soon as the check finds its table gone,
    // long before the hourly rescan; the others go on.
    execute(&pool, "DROP SCHEMA tenant_b CASCADE").await;
    wait_until("tenant_b is let go", Duration::from_secs(5), || async {
        seen.removed
            .lock()
            .unwrap()
            .contains(&"tenants/tenant_b".to_owned())
    })
    .await;
    insert(&pool, "tenant_a", "a9", 1).await;
    wait_until("tenant_a still served", LONG, || async {
        publisher
            .deliveries()
            .iter()
            .any(|e| e.aggregate_id == "a9")
    })
    .await;
    assert!(
        relay.statuses().iter().all(|s| s.healthy()),
        "{:?}",
        relay.statuses()
    );
    relay.shutdown_within(LONG).await.unwrap();
}

async fn all_dormant(relay: &SourcesHandle) {
    wait_until("every source is dormant", LONG, || async {
        relay
            .statuses()
            .iter()
            .all(|s| s.state == SourceState::Dormant)
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_no_wake_up_announced_is_found_by_the_check() {
    let (_db, pool) = migrated_test_db().await;
    migrate(&pool, "tenant_a").await;
    let publisher = TestPublisher::new();
    let relay = start_with(
        &pool,
        &publisher,
        Arc::new(Seen::default()),
        fast_config("sources-test"),
        Duration::from_millis(300),
    )
    .await;
    all_dormant(&relay).await;
    // As an instance working the schema alone leaves it: producers are
    // told nobody sleeps, so this commit sends no notification.
    execute(
        &pool,
        "SELECT setval('tenant_a.outbox_relay_idle_until', 0)",
    )
    .await;
    tokio::time::sleep(Duration::from_millis(700)).await;
    insert(&pool, "tenant_a", "quiet", 1).await;
    wait_until(
        "the unannounced event is delivered",
        Duration::from_secs(10),
        || async {
            publisher
                .deliveries()
                .iter()
                .any(|e| e.aggregate_id == "quiet")
        },
    )
    .await;
    relay.shutdown_within(LONG).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dormant_source_wakes_when_a_backoff_ends() {
    let (_db, pool) = migrated_test_db().await;
    migrate(&pool, "tenant_a").await;
    let publisher = TestPublisher::new();
    publisher.fail(
        outbox_testkit::Match::Aggregate("flaky".to_owned()),
        outbox_testkit::Fail::Retry,
        Some(1),
    );
    let config = outbox::RelayConfig {
        backoff_base_ms: 1_500,
        backoff_max_ms: 1_500,
        ..fast_config("sources-test")
    };
    // A check so rare that only the backoff's end can wake the source.
    let relay = start_with(
        &pool,
        &publisher,
        Arc::new(Seen::default()),
        config,
        Duration::from_secs(60),
    )
    .await;
    insert(&pool, "tenant_a", "flaky", 1).await;
    wait_until("the first attempt failed", LONG, || async {
        !publisher.attempts().is_empty()
    })
    .await;
    all_dormant(&relay).await;
    assert_eq!(publisher.delivered_count(), 0);
    wait_until(
        "the retry is delivered",
        Duration::from_secs(10),
        || async { publisher.delivered_count() == 1 },
    )
    .await;
    relay.shutdown_within(LONG).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_letter_retried_in_a_dormant_source_is_delivered_at_once() {
    let (_db, pool) = migrated_test_db().await;
    migrate(&pool, "tenant_a").await;
    let publisher = TestPublisher::new();
    publisher.fail(
        outbox_testkit::Match::Aggregate("poison".to_owned()),
        outbox_testkit::Fail::Reject,
        None,
    );
    // Checks so rare that only the retry's own wake-up can start the worker.
    let relay = start_with(
        &pool,
        &publisher,
        Arc::new(Seen::default()),
        fast_config("sources-test"),
        Duration::from_secs(60),
    )
    .await;
    insert(&pool, "tenant_a", "poison", 1).await;
    wait_until("the event is dead-lettered", LONG, || async {
        common::count(
            &pool,
            "SELECT count(*) FROM tenant_a.outbox_events WHERE dead_lettered_at IS NOT NULL",
        )
        .await
            == 1
    })
    .await;
    all_dormant(&relay).await;
    publisher.heal();
    let mut conn = pool.acquire().await.unwrap();
    let retried = outbox::DeadLetters::new(&Schema::new("tenant_a").unwrap())
        .retry(
            &mut conn,
            &outbox::Selector {
                aggregate_id: Some("poison".to_owned()),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(retried, 1);
    wait_until(
        "the retried event is delivered",
        Duration::from_secs(5),
        || async { publisher.delivered_count() == 1 },
    )
    .await;
    relay.shutdown_within(LONG).await.unwrap();
}

/// `found_all` says when the statuses list every source: once it is true,
/// every `schema` entry and every schema a pattern matches is there (a
/// drain that counted pending events before would count none and stop);
/// while a database does not answer, it stays false.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn found_all_is_true_only_once_every_entry_is_resolved() {
    let (_db, pool) = migrated_test_db().await;
    for t in ["tenant_a", "tenant_b", "tenant_c"] {
        migrate(&pool, t).await;
    }
    let publisher = TestPublisher::new();
    let relay = start(&pool, &publisher, Arc::new(Seen::default())).await;
    wait_until("every entry is resolved", LONG, || async {
        relay.found_all()
    })
    .await;
    assert_eq!(relay.statuses().len(), 4, "main and three tenants");
    relay.shutdown_within(LONG).await.unwrap();

    // A database that does not answer: nothing is resolved.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let down = sqlx::postgres::PgPoolOptions::new()
        .acquire_timeout(Duration::from_millis(200))
        .connect_lazy(&format!("postgres://nobody@127.0.0.1:{port}/none"))
        .unwrap();
    let relay = start(&down, &publisher, Arc::new(Seen::default())).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(
        !relay.found_all(),
        "a pattern never matched is not resolved"
    );
    relay.shutdown_within(LONG).await.unwrap();
}
