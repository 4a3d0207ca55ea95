//! The README's first command.

mod common;

use outbox_testkit::postgres::test_db;

#[test]
fn the_demo_runs_on_its_own_throwaway_postgres() {
    let out = common::run(&["demo", "--orders", "300"], None);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("started a throwaway PostgreSQL"), "{err}");
    assert!(err.contains("300 events relayed"), "{err}");
    assert!(err.contains("pending 0, dead letters 0"), "{err}");
    // the events went to stdout as JSON lines
    let lines: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
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
