//! `[publisher] format` as the program sees it: `--format` and the
//! environment choose CloudEvents for a relay run from PostgreSQL, a bad
//! format is refused in one line naming the key, the value and the choices,
//! and the default is the plain format.

mod common;

use outbox::{NewEvent, Outbox};
use outbox_testkit::postgres::migrated_test_db;
use serde_json::Value;

#[test]
fn a_bad_format_or_source_is_refused_naming_the_key() {
    let out = common::config_check(&[], &["--format", "cloudevents"]);
    let err = common::text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert_eq!(
        err.trim(),
        "error: invalid publisher.format = \"cloudevents\" (set by --format): use plain, cloudevents-binary or cloudevents-structured"
    );
    let out = common::config_check(&[("OUTBOX_PUBLISHER_FORMAT", "binary")], &[]);
    let err = common::text(&out.stderr);
    assert!(
        err.contains("publisher.format = \"binary\"") && err.contains("OUTBOX_PUBLISHER_FORMAT"),
        "{err}"
    );
    let out = common::config_check(&[], &["--cloudevents-source", ""]);
    let err = common::text(&out.stderr);
    assert!(err.contains("publisher.cloudevents_source"), "{err}");

    let out = common::config_check(&[], &["--format", "cloudevents-binary"]);
    let shown = common::text(&out.stdout);
    assert!(out.status.success(), "{}", common::text(&out.stderr));
    assert!(
        shown.contains("format = \"cloudevents-binary\"")
            && shown.contains("cloudevents_source = \"/outbox/{schema}\""),
        "{shown}"
    );
}

/// A relay with `--format cloudevents-structured` writes one CloudEvent
/// per line, `source` filled with the schema; the SDK reads each back.
#[tokio::test]
async fn a_relay_writes_cloudevents_the_sdk_reads() {
    let (db, pool) = migrated_test_db().await;
    let events: Vec<NewEvent> = (0..5)
        .map(|n| {
            common::event(&format!("a{n}"), n).header(
                "traceparent",
                "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            )
        })
        .collect();
    Outbox::new().enqueue_many(&pool, &events).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let sink = dir.path().join("events.jsonl");
    let out = common::bin()
        .env("DATABASE_URL", &db.url)
        .args([
            "relay",
            "--drain",
            "--publisher",
            &format!("file:{}", sink.display()),
            "--format",
            "cloudevents-structured",
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", common::text(&out.stderr));
    let lines = std::fs::read_to_string(&sink).unwrap();
    let lines: Vec<&str> = lines.lines().collect();
    assert_eq!(lines.len(), 5);
    for line in lines {
        let ce: Value = serde_json::from_str(line).unwrap();
        let e = events
            .iter()
            .find(|e| e.id.to_string() == ce["id"])
            .expect("one of ours");
        let expect = serde_json::json!({
            "specversion": "1.0",
            "id": e.id.to_string(),
            "source": "/outbox/public",
            "type": "order.updated",
            "subject": e.aggregate_id,
            "time": ce["time"],
            "datacontenttype": "application/json",
            "aggregatetype": "order",
            "partitionkey": e.aggregate_id,
            "traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        });
        let input = serde_json::json!({ "body": line, "expect": expect });
        let read = outbox_testkit::cloudevents::sdk_read("json", &input)
            .unwrap_or_else(|e| panic!("the SDK refused {line}: {e}"));
        assert_eq!(read["data"], e.payload);
    }
}

/// `bench drain --format` builds each message in that format; a bad one is
/// refused by name.
#[cfg(feature = "bench")]
#[tokio::test]
async fn bench_drain_builds_messages_in_the_format_asked() {
    let (_db, v, stdout) =
        common::bench_fresh("drain --events 2000 --aggregates 50 --format cloudevents-binary")
            .await;
    assert!(
        stdout.contains("null publisher, cloudevents-binary messages built"),
        "{stdout}"
    );
    assert_eq!(v["format"], "cloudevents-binary");
    assert!(v["relay_events_per_sec"].as_f64().unwrap() > 0.0);

    let out = common::run(&["bench", "drain", "--format", "xml"], None);
    let err = common::text(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("--format")
            && err.contains("plain, cloudevents-binary or cloudevents-structured"),
        "{err}"
    );
}
