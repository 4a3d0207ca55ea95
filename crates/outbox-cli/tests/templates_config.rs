//! `outbox config check` and destination templates: an unknown placeholder
//! is refused at start-up, in one line naming the publisher's setting and
//! the placeholder and listing the valid ones; the full syntax is accepted.

mod common;

use std::process::Output;

const DATABASE: &str = "database_url = \"postgres://app@127.0.0.1:1/app\"\n";
const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

/// `outbox config check` of a file holding `publisher`.
fn check(publisher: &str) -> Output {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("outbox.toml");
    std::fs::write(&path, format!("{DATABASE}{publisher}")).unwrap();
    common::bin()
        .env_remove("OUTBOX_CONFIG")
        .env("OUTBOX_PUBLISHER_HTTP_SECRET", SECRET)
        .args(["config", "check", path.to_str().unwrap()])
        .output()
        .unwrap()
}

/// The publisher tables, each with `template` in its destination setting,
/// and the setting's name.
fn tables(template: &str) -> [(String, &'static str); 5] {
    [
        (
            format!("[publisher]\nspec = \"kafka://127.0.0.1:1\"\n[publisher.kafka]\ntopic_template = \"{template}\"\n"),
            "kafka setting topic_template",
        ),
        (
            format!("[publisher]\nspec = \"amqp://u:p@127.0.0.1:1/v\"\n[publisher.amqp]\nrouting_key_template = \"{template}\"\n"),
            "amqp setting routing_key_template",
        ),
        (
            format!("[publisher]\nspec = \"nats://127.0.0.1:1\"\n[publisher.nats]\nsubject = \"{template}\"\n"),
            "nats setting subject",
        ),
        (
            format!("[publisher]\nspec = \"redis://127.0.0.1:1\"\n[publisher.redis]\nstream = \"{template}\"\n"),
            "redis setting stream",
        ),
        (
            format!("[publisher]\nspec = \"http://127.0.0.1:1/hooks/{template}\"\n"),
            "http setting url",
        ),
    ]
}

#[test]
fn an_unknown_placeholder_is_refused_by_name_with_its_setting() {
    for (table, setting) in tables("orders.{tenant}") {
        let out = check(&table);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{table}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "one line: {err:?}");
        for needle in [
            setting,
            "unknown placeholder {tenant}",
            "{aggregate_type}, {event_type}, {aggregate_id}",
            "{header.NAME:-DEFAULT}",
        ] {
            assert!(err.contains(needle), "{err:?} should mention {needle:?}");
        }
    }
}

#[test]
fn every_placeholder_and_a_header_default_are_accepted() {
    for (table, setting) in
        tables("o.{aggregate_type}.{event_type}.{aggregate_id}.{header.tenant:-shared}")
    {
        let out = check(&table);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{setting}: {err}");
        assert!(
            String::from_utf8_lossy(&out.stdout).contains("{header.tenant:-shared}"),
            "{setting}: the check shows the template as written"
        );
    }
}
