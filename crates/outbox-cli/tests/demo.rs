//! The README's first command, in both delivery modes.

mod common;

use std::collections::{BTreeMap, BTreeSet};

use outbox_testkit::postgres::{test_db, PgCluster, PgOptions};

/// The demo's events on stdout, one JSON line each.
fn events(out: &std::process::Output) -> Vec<serde_json::Value> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// Every order 1..=`orders` delivered exactly once, as its customer's
/// event; and, within each customer, the orders of one producer in the
/// order it committed them. Producer `p` of `producers` commits orders
/// `p + 1`, `p + 1 + producers`, ... one transaction after another, so a
/// customer's later order from it must never arrive first.
fn assert_every_order_once_in_order(events: &[serde_json::Value], orders: u64, producers: u64) {
    let mut seen = BTreeSet::new();
    let mut last: BTreeMap<(String, u64), u64> = BTreeMap::new();
    for e in events {
        let order = e["payload"]["order_id"].as_u64().unwrap();
        let customer = e["payload"]["customer_id"].as_u64().unwrap();
        let aggregate = e["aggregate_id"].as_str().unwrap().to_owned();
        assert_eq!(aggregate, format!("customer-{customer}"), "{e}");
        assert!(seen.insert(order), "order {order} delivered twice");
        let producer = (order - 1) % producers;
        if let Some(before) = last.insert((aggregate.clone(), producer), order) {
            assert!(
                before < order,
                "{aggregate}: order {order} arrived after order {before}, which was committed after it"
            );
        }
    }
    assert_eq!(seen, (1..=orders).collect::<BTreeSet<_>>());
}

#[test]
fn the_demo_runs_on_its_own_throwaway_postgres() {
    let out = common::run(&["demo", "--orders", "300"], None);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("started a throwaway PostgreSQL"), "{err}");
    assert!(err.contains("300 events relayed"), "{err}");
    assert!(err.contains("pending 0, dead letters 0"), "{err}");
    // the events went to stdout as JSON lines
    let lines = events(&out);
    assert_eq!(lines.len(), 300);
    assert_eq!(lines[0]["event_type"], "order.created");
    for key in [
        "id",
        "aggregate_type",
        "aggregate_id",
        "payload",
        "headers",
        "created_at",
    ] {
        assert!(lines[0].get(key).is_some(), "{key} in {}", lines[0]);
    }
    // four producers, the default
    assert_every_order_once_in_order(&lines, 300, 4);
}

#[test]
fn the_demo_runs_in_the_wal_mode_on_its_own_throwaway_postgres() {
    let out = common::run(
        &[
            "demo",
            "--mode",
            "wal",
            "--orders",
            "1000",
            "--producers",
            "4",
        ],
        None,
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains("started a throwaway PostgreSQL") && err.contains("wal_level = logical"),
        "{err}"
    );
    assert!(
        err.contains("delivery mode wal")
            && err.contains("outbox_emit")
            && err.contains("replication slot outbox_public"),
        "{err}"
    );
    assert!(err.contains("1000 events relayed"), "{err}");
    assert!(err.contains("pending 0, dead letters 0"), "{err}");
    let lines = events(&out);
    assert_eq!(lines.len(), 1000);
    assert_eq!(lines[0]["event_type"], "order.created");
    for key in [
        "id",
        "aggregate_type",
        "aggregate_id",
        "payload",
        "headers",
        "created_at",
    ] {
        assert!(lines[0].get(key).is_some(), "{key} in {}", lines[0]);
    }
    assert_every_order_once_in_order(&lines, 1000, 4);
    // The slot is read in commit order: within a customer, the stream's
    // positions only grow.
    let mut last: BTreeMap<&str, i64> = BTreeMap::new();
    for e in &lines {
        let (aggregate, seq) = (
            e["aggregate_id"].as_str().unwrap(),
            e["seq"].as_i64().unwrap(),
        );
        if let Some(before) = last.insert(aggregate, seq) {
            assert!(before < seq, "{aggregate}: position {seq} after {before}");
        }
    }
}

#[tokio::test]
async fn the_wal_mode_uses_database_url_when_given_and_says_the_slot_stays() {
    let cluster = tokio::task::spawn_blocking(|| outbox_testkit::postgres::logical_cluster(&[]))
        .await
        .unwrap();
    let out = common::run(
        &["demo", "--mode", "wal", "--orders", "150", "--quiet"],
        Some(&cluster.url()),
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(!err.contains("throwaway"), "{err}");
    assert!(err.contains("150 events relayed"), "{err}");
    assert!(err.contains("pending 0, dead letters 0"), "{err}");
    assert!(
        err.contains("stays in the WAL mode") && err.contains("slot outbox_public holds WAL"),
        "{err}"
    );
    assert!(out.stdout.is_empty());
}

#[tokio::test]
async fn the_wal_mode_refuses_a_database_url_without_logical_decoding_in_one_line() {
    let replica = tokio::task::spawn_blocking(|| {
        PgCluster::start_with(PgOptions {
            extra_conf: vec![("wal_level".into(), "replica".into())],
            ..PgOptions::default()
        })
        .unwrap()
    })
    .await
    .unwrap();
    let out = common::run(&["demo", "--mode", "wal", "--quiet"], Some(&replica.url()));
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    let errors: Vec<&str> = err.lines().filter(|l| l.starts_with("error")).collect();
    assert_eq!(errors.len(), 1, "one error line: {err}");
    assert!(
        errors[0].contains("wal_level = logical")
            && errors[0].contains("wal_level = replica")
            && errors[0].contains("ALTER SYSTEM")
            && errors[0].contains("unset DATABASE_URL"),
        "{err}"
    );
    // nothing was written to that server
    let status = common::run(&["status"], Some(&replica.url()));
    assert!(!status.status.success(), "{}", common::text(&status.stdout));
}

#[test]
fn a_mode_that_does_not_exist_is_refused_naming_the_modes() {
    let out = common::run(&["demo", "--mode", "logical"], None);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("use table or wal"), "{err}");
    assert!(
        !err.contains("throwaway"),
        "refused before starting anything: {err}"
    );
}

#[tokio::test]
async fn the_demo_uses_database_url_when_given() {
    let db = test_db().await;
    let out = common::run(&["demo", "--orders", "150", "--quiet"], Some(&db.url));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(!err.contains("throwaway"), "{err}");
    assert!(err.contains("150 events relayed"), "{err}");
    assert!(out.stdout.is_empty());
}
