//! Bad input to the program is a one-line error and a non-zero exit, never
//! a panic; passwords never appear.

mod common;

use outbox_testkit::postgres::test_db;

fn stderr_of(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn assert_clean_failure(out: &std::process::Output, needle: &str) {
    let err = stderr_of(out);
    assert!(!out.status.success(), "should fail: {err}");
    assert!(!err.contains("panicked"), "no panics: {err}");
    assert_eq!(err.trim().lines().count(), 1, "one line: {err:?}");
    assert!(err.contains(needle), "{err:?} should mention {needle:?}");
}

#[test]
fn a_malformed_url_is_named() {
    let out = common::run(&["status"], Some("not-a-url"));
    assert_clean_failure(&out, "invalid database URL");
}

#[test]
fn an_unreachable_server_is_one_line_and_the_password_is_hidden() {
    let port = outbox_testkit::postgres::free_port();
    let url = format!("postgres://app:hunter2@127.0.0.1:{port}/db");
    let out = common::run(&["status", "--database-url", &url], None);
    assert_clean_failure(&out, "cannot connect");
    assert!(!stderr_of(&out).contains("hunter2"));
}

#[test]
fn no_url_at_all_says_how_to_give_one() {
    let out = common::run(&["migrate"], None);
    assert_clean_failure(&out, "DATABASE_URL");
}

#[tokio::test]
async fn a_missing_schema_says_to_migrate() {
    let db = test_db().await;
    let out = common::run(&["status"], Some(&db.url));
    assert_clean_failure(&out, "outbox migrate");
    let out = common::run(&["relay", "--drain"], Some(&db.url));
    assert_clean_failure(&out, "outbox migrate");
}

#[tokio::test]
async fn bad_flags_name_the_field_and_the_fix() {
    let db = test_db().await;
    let out = common::run(&["relay", "--publisher", "kafkaa://x"], Some(&db.url));
    assert_clean_failure(&out, "unknown --publisher");
    let out = common::run(&["relay", "--batch-size", "0"], Some(&db.url));
    assert_clean_failure(&out, "batch_size");
    let out = common::run(&["--schema", "Bad-Name", "status"], Some(&db.url));
    assert_clean_failure(&out, "schema");
    let out = common::run(
        &["relay", "--publisher", "file:/nonexistent-dir/x.jsonl"],
        Some(&db.url),
    );
    assert_clean_failure(&out, "file");
}

#[tokio::test]
async fn migrate_twice_then_status() {
    let db = test_db().await;
    let first = common::run(&["migrate"], Some(&db.url));
    assert!(first.status.success(), "{}", stderr_of(&first));
    assert!(String::from_utf8_lossy(&first.stdout).contains("applied 0001_outbox"));
    let second = common::run(&["migrate"], Some(&db.url));
    assert!(String::from_utf8_lossy(&second.stdout).contains("up to date"));
    let status = common::run(&["status", "--json"], Some(&db.url));
    assert!(status.status.success());
    let v: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    assert_eq!(v["pending"], 0);
    assert_eq!(v["partitions"].as_array().unwrap().len(), 32);
}
