//! Layered configuration as the program sees it: a TOML file, environment
//! variables and flags, flags winning over the environment winning over the
//! file; and every way a bad setting is refused at start-up, with one line
//! naming the key, the value, its origin and what is allowed.

mod common;

use std::path::{Path, PathBuf};
use std::process::Output;

use outbox::Outbox;
use outbox_testkit::postgres::migrated_test_db;

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

/// The value and origin comment of `key = …` in a rendered configuration.
fn line_of<'a>(rendered: &'a str, key: &str) -> &'a str {
    rendered
        .lines()
        .find(|l| l.starts_with(&format!("{key} = ")))
        .unwrap_or_else(|| panic!("no {key} in\n{rendered}"))
}

fn refused(out: &Output, needles: &[&str]) {
    let err = common::text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "should fail: {err}");
    assert!(!err.contains("panicked"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "one line: {err:?}");
    for needle in needles {
        assert!(err.contains(needle), "{err:?} should mention {needle:?}");
    }
}

#[test]
fn flags_beat_environment_beat_file_beat_defaults() {
    let dir = tempfile::tempdir().unwrap();
    let file = write(
        dir.path(),
        "outbox.toml",
        "schema = \"from_file\"\n\n[relay]\nbatch_size = 10\nmax_attempts = 3\nlease_ms = 2000\n",
    );
    let path = file.to_str().unwrap();
    let env = [
        ("OUTBOX_RELAY_BATCH_SIZE", "20"),
        ("OUTBOX_RELAY_MAX_ATTEMPTS", "4"),
        ("OUTBOX_SCHEMA", "from_env"),
    ];
    let out = common::config_check(&env, &[path, "--batch-size", "30", "--schema", "from_flag"]);
    assert!(out.status.success(), "{}", common::text(&out.stderr));
    let shown = common::text(&out.stdout);
    assert!(
        line_of(&shown, "batch_size").contains("= 30")
            && line_of(&shown, "batch_size").contains("--batch-size")
    );
    assert!(
        line_of(&shown, "max_attempts").contains("= 4")
            && line_of(&shown, "max_attempts").contains("OUTBOX_RELAY_MAX_ATTEMPTS")
    );
    assert!(
        line_of(&shown, "lease_ms").contains("= 2000")
            && line_of(&shown, "lease_ms").contains(&format!("{path}:6"))
    );
    assert!(
        line_of(&shown, "poll_max_ms").contains("= 500")
            && line_of(&shown, "poll_max_ms").contains("default")
    );
    assert!(line_of(&shown, "schema").contains("from_flag"), "{shown}");

    // Without the flags the environment wins; without both, the file.
    let out = common::config_check(&env, &[path]);
    let shown = common::text(&out.stdout);
    assert!(line_of(&shown, "batch_size").contains("= 20"), "{shown}");
    assert!(line_of(&shown, "schema").contains("from_env"), "{shown}");
    let out = common::config_check(&[("OUTBOX_CONFIG", path)], &[]);
    let shown = common::text(&out.stdout);
    assert!(line_of(&shown, "batch_size").contains("= 10"), "{shown}");
    assert!(line_of(&shown, "schema").contains("from_file"), "{shown}");
}

#[test]
fn config_check_never_connects_and_hides_the_password() {
    let dir = tempfile::tempdir().unwrap();
    // Nothing listens on port 1: check must not try. (The broker table is
    // checked as the relay checks it, so it holds only keys the publisher
    // knows; secret keys in tables are covered by hostile_secrets.rs.)
    let file = write(
        dir.path(),
        "outbox.toml",
        "database_url = \"postgres://app:hunter2@127.0.0.1:1/app\"\n[publisher]\nspec = \"amqp://u:hunter2@127.0.0.1:1/v\"\n[publisher.amqp]\nexchange = \"orders\"\n",
    );
    let out = common::config_check(&[], &[file.to_str().unwrap()]);
    let (stdout, stderr) = (common::text(&out.stdout), common::text(&out.stderr));
    assert!(out.status.success(), "{stderr}");
    assert!(
        !stdout.contains("hunter2") && !stderr.contains("hunter2"),
        "{stdout}{stderr}"
    );
    assert!(
        stdout.contains("postgres://app:***@127.0.0.1:1/app"),
        "{stdout}"
    );
    assert!(stdout.contains("exchange = \"orders\""), "{stdout}");
    // The output is itself a valid config file.
    let again = write(dir.path(), "again.toml", &stdout);
    assert!(common::config_check(&[], &[again.to_str().unwrap()])
        .status
        .success());
}

#[test]
fn unknown_keys_and_wrong_types_in_the_file_name_file_line_and_key() {
    let dir = tempfile::tempdir().unwrap();
    let f = write(
        dir.path(),
        "a.toml",
        "schema = \"app\"\n\n[relay]\nbatch_sise = 3\n",
    );
    let shown = f.display().to_string();
    refused(
        &common::config_check(&[], &[f.to_str().unwrap()]),
        &[&format!("{shown}:4"), "[relay]", "batch_sise", "batch_size"],
    );
    let f = write(dir.path(), "b.toml", "[http]\naddr = 9090\n");
    refused(
        &common::config_check(&[], &[f.to_str().unwrap()]),
        &["b.toml:2", "http.addr", "integer", "string"],
    );
    let f = write(dir.path(), "c.toml", "[relay]\nmax_attempts = \"many\"\n");
    refused(
        &common::config_check(&[], &[f.to_str().unwrap()]),
        &["c.toml:2", "relay.max_attempts", "many", "whole number"],
    );
    let f = write(dir.path(), "d.toml", "[relay\n");
    refused(
        &common::config_check(&[], &[f.to_str().unwrap()]),
        &["d.toml:1", "invalid TOML"],
    );
    refused(
        &common::config_check(&[], &[dir.path().join("missing.toml").to_str().unwrap()]),
        &["cannot read config file", "missing.toml"],
    );
    // Every command reads the file, not only `config check`.
    let f = write(dir.path(), "e.toml", "databse_url = \"postgres://h/d\"\n");
    refused(
        &common::run(&["--config", f.to_str().unwrap(), "status"], None),
        &["e.toml:1", "databse_url"],
    );
}

#[test]
fn out_of_range_values_name_key_value_origin_and_range() {
    let dir = tempfile::tempdir().unwrap();
    let f = write(dir.path(), "r.toml", "[relay]\nlease_ms = 100\n");
    refused(
        &common::config_check(&[], &[f.to_str().unwrap()]),
        &["relay.lease_ms", "100", "r.toml:2", "500 to 600000"],
    );
    refused(
        &common::config_check(&[("OUTBOX_RELAY_BATCH_SIZE", "0")], &[]),
        &[
            "relay.batch_size",
            " 0 ",
            "OUTBOX_RELAY_BATCH_SIZE",
            "1 to 100000",
        ],
    );
    refused(
        &common::config_check(&[], &["--shutdown-timeout-secs", "0"]),
        &[
            "shutdown_timeout_secs = 0",
            "--shutdown-timeout-secs",
            "1 to 3600",
        ],
    );
    refused(
        &common::config_check(&[("OUTBOX_HTTP_REFRESH_MS", "5")], &[]),
        &[
            "http.refresh_ms = 5",
            "OUTBOX_HTTP_REFRESH_MS",
            "100 to 3600000",
        ],
    );
    refused(
        &common::config_check(&[], &["--http-addr", "localhost"]),
        &["http.addr", "\"localhost\"", "--http-addr", "HOST:PORT"],
    );
    refused(
        &common::config_check(&[("OUTBOX_LOG_LEVEL", "loud")], &[]),
        &["log.level", "loud", "OUTBOX_LOG_LEVEL", "debug"],
    );
    refused(
        &common::config_check(&[("OUTBOX_PUBLISHER", "kafkaa://x")], &[]),
        &["unknown OUTBOX_PUBLISHER", "kafkaa://x", "file:PATH"],
    );
    refused(
        &common::config_check(&[], &["--schema", "Bad-Name"]),
        &["invalid schema", "--schema", "Bad-Name"],
    );
}

#[test]
fn bad_environment_variables_are_named() {
    refused(
        &common::config_check(&[("OUTBOX_RELAY_MAX_ATTEMPTS", "ten")], &[]),
        &["OUTBOX_RELAY_MAX_ATTEMPTS", "\"ten\"", "whole number"],
    );
    refused(
        &common::config_check(&[("OUTBOX_RELAY_RETENTION", "forever")], &[]),
        &["OUTBOX_RELAY_RETENTION", "forever", "delete", "keep"],
    );
    refused(
        &common::config_check(&[("OUTBOX_RELAY_LISTEN", "maybe")], &[]),
        &["OUTBOX_RELAY_LISTEN", "maybe", "true or false"],
    );
    refused(
        &common::config_check(&[("OUTBOX_RELAY_BATCH_SISE", "5")], &[]),
        &[
            "unknown environment variable OUTBOX_RELAY_BATCH_SISE",
            "OUTBOX_RELAY_BATCH_SIZE",
        ],
    );
    refused(
        &common::config_check(&[("OUTBOX_LOG_FORMAT", "xml")], &[]),
        &["OUTBOX_LOG_FORMAT", "xml", "json"],
    );
    refused(
        &common::run(
            &["status"],
            Some("postgres://app:hunter2@127.0.0.1:notaport/db"),
        ),
        &["invalid database URL", "DATABASE_URL"],
    );
}

/// The file is not only shown: a relay runs from it.
#[tokio::test]
async fn a_relay_runs_from_the_config_file() {
    let (db, pool) = migrated_test_db().await;
    let events: Vec<_> = (0..120)
        .map(|n| common::event(&format!("a{}", n % 7), n))
        .collect();
    Outbox::new().enqueue_many(&pool, &events).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let sink = dir.path().join("events.jsonl");
    let file = write(
        dir.path(),
        "outbox.toml",
        &format!(
            "drain = true\npublisher = \"file:{}\"\n[relay]\ninstance_id = \"from-file\"\nbatch_size = 25\n",
            sink.display()
        ),
    );
    let out = common::bin()
        .env("DATABASE_URL", &db.url)
        .args(["--config", file.to_str().unwrap(), "relay"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", common::text(&out.stderr));
    let ids: Vec<_> = events.iter().map(|e| e.id).collect();
    let (lines, dups) = common::check_deliveries(&sink, &ids);
    assert_eq!((lines, dups), (120, 0));
}
