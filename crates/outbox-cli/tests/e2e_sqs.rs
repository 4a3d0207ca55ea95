//! The `outbox` program publishing to Amazon SQS, end to end, against
//! moto's server mode (the test kit starts it; `pip install
//! "moto[server]"`, or `OUTBOX_SKIP_BROKER_TESTS=moto` to skip): events
//! written by plain SQL, `outbox relay --drain --publisher sqs://orders.fifo`
//! run as a child process with the SDK's standard variables
//! (`AWS_ENDPOINT_URL`, `AWS_REGION`, keys), every message read back with
//! the SDK; the same rows published again (a crash that repeats a window)
//! leave no second copy; and what bad SQS settings do to `config check`,
//! `relay` and `/readyz`.
#![cfg(feature = "sqs")]

mod common;

use std::time::Duration;

use outbox_testkit::brokers::moto::{client, Moto};
use sqlx::PgPool;
use uuid::Uuid;

const AGGREGATES: i64 = 50;
const PER_AGGREGATE: i64 = 40;
const QUEUE: &str = "orders.fifo";
/// A secret that must never be printed.
const SECRET: &str = "hunter2-secret-key";

/// `outbox` with moto's variables (and a secret key to be kept quiet).
fn bin(moto: &Moto) -> std::process::Command {
    let mut cmd = common::bin();
    for (k, v) in moto.env() {
        cmd.env(k, v);
    }
    cmd.env("AWS_SECRET_ACCESS_KEY", SECRET);
    cmd
}

/// Runs `outbox relay --drain --publisher SPEC` through [`common::drain`]
/// (exit 0, nothing left, nothing dead-lettered), and requires that the
/// secret key was not printed.
async fn drain_with(moto: &Moto, url: &str, pool: &PgPool, spec: &str) -> Duration {
    let mut cmd = bin(moto);
    cmd.env("DATABASE_URL", url)
        .args(["relay", "--drain", "--publisher", spec])
        .args(["--instance-id", "sqs-e2e"]);
    let (took, stderr) = common::drain(cmd, pool).await;
    assert!(!stderr.contains(SECRET), "{stderr}");
    took
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relay_program_delivers_to_a_fifo_queue_once_in_order() {
    let Some(moto) = Moto::start_or_skip_blocking().await else {
        return;
    };
    let sqs = client::sqs(&moto.url());
    let queue_url = client::create_queue(&sqs, QUEUE).await;
    let (db, pool) = outbox_testkit::postgres::migrated_test_db().await;
    let expected = common::insert_backlog(&pool, AGGREGATES, PER_AGGREGATE).await;
    // The rows as written, to write them again after the drain.
    sqlx::query("CREATE TABLE saved_events AS SELECT * FROM outbox_events")
        .execute(&pool)
        .await
        .unwrap();
    let spec = format!("sqs://{QUEUE}");
    let took = drain_with(&moto, &db.url, &pool, &spec).await;

    // A crash that repeats the window: the same rows, pending again, sent
    // within the 5-minute window. (moto, unlike SQS, compares ids only with
    // messages still in the queue, so this comes before the read-back.)
    sqlx::query("DELETE FROM outbox_events")
        .execute(&pool)
        .await
        .unwrap();
    let again = sqlx::query(
        "INSERT INTO outbox_events (id, aggregate_type, aggregate_id, event_type, payload, headers)
         SELECT id, aggregate_type, aggregate_id, event_type, payload, headers
         FROM saved_events ORDER BY seq",
    )
    .execute(&pool)
    .await
    .unwrap()
    .rows_affected();
    assert_eq!(again, expected.len() as u64);
    let took_again = drain_with(&moto, &db.url, &pool, &spec).await;

    // Everything the queue holds: the first copies, and any second one
    // (read until nothing more comes).
    let got = client::receive(&sqs, &queue_url, Duration::from_secs(180), |got| {
        got.len() >= expected.len()
    })
    .await;
    let mut got = got;
    if got.len() == expected.len() {
        got.extend(client::receive(&sqs, &queue_url, Duration::ZERO, |_| false).await);
    }
    let mut deliveries = Vec::with_capacity(got.len());
    for (i, m) in got.iter().enumerate() {
        let id: Uuid = m
            .attributes
            .get("outbox-event-id")
            .and_then(|id| id.parse().ok())
            .unwrap_or_else(|| panic!("message {i} has no event id: {m:?}"));
        let Some((aggregate, n)) = expected.get(&id) else {
            panic!("message {i} is event {id}, which was never written");
        };
        assert_eq!(m.dedup_id, Some(id.to_string()), "dedup id = event id");
        assert_eq!(
            m.group_id.as_ref(),
            Some(aggregate),
            "group id = aggregate id"
        );
        assert_eq!(m.attributes.get("outbox-aggregate-id"), Some(aggregate));
        assert!(m.attributes.contains_key("traceparent"), "{m:?}");
        let body: serde_json::Value = serde_json::from_str(&m.body).expect("a JSON body");
        assert_eq!(body["n"].as_i64(), Some(*n), "{id}: body {body}");
        deliveries.push((id, aggregate.as_str(), *n));
    }
    let dups =
        outbox_testkit::assert_delivered_once_in_order("sqs: ", expected.keys(), &deliveries);
    assert_eq!(
        dups, 0,
        "a FIFO queue stores each event id once, though published twice"
    );
    eprintln!(
        "sqs: {} events written and published twice, {} messages read back, 0 lost, {dups} duplicates (relay drained in {took:.2?}, then again in {took_again:.2?})",
        expected.len(),
        got.len()
    );
}

/// Runs `outbox config check` or `relay` with `spec` and the config file
/// text `file`, if any.
fn run(command: &str, spec: &str, file: Option<&str>) -> std::process::Output {
    let secret = [("AWS_SECRET_ACCESS_KEY", Some(SECRET))];
    common::run_settings(command, spec, file, &secret)
}

#[test]
fn bad_sqs_and_sns_settings_are_one_clear_line() {
    let cases: &[(&str, Option<&str>, &[&str])] = &[
        ("sqs://", None, &["queue", "sqs://QUEUE_NAME"]),
        ("sqs://orders.events", None, &["queue", "sqs://QUEUE_NAME"]),
        (
            "sqs://https://sqs.us-east-1.amazonaws.com/",
            None,
            &["queue"],
        ),
        ("sqs:orders", None, &["unknown", "sqs://QUEUE_NAME"]),
        ("sns://orders", None, &["topic_arn", "sns://TOPIC_ARN"]),
        (
            "sqs://orders.fifo",
            Some("[publisher.sqs]\nqueue_url = \"x\"\n"),
            &["queue_url"],
        ),
        (
            "sqs://orders.fifo",
            Some("[publisher.sqs]\nregion = \"Mars 1\"\n"),
            &["region"],
        ),
        (
            "sns://arn:aws:sns:us-east-1:123456789012:t",
            Some("[publisher.sns]\nmax_message_bytes = 5000000\n"),
            &["max_message_bytes"],
        ),
    ];
    common::assert_bad_settings_fail_in_one_line(cases, "file", &[SECRET], run);
    for (spec, file) in [
        (
            "sqs://orders.fifo",
            "[publisher.sqs]\nmax_concurrent_calls = 4\n",
        ),
        (
            "sns://arn:aws:sns:us-east-1:123456789012:orders.fifo",
            "[publisher.sns]\nregion = \"us-east-1\"\n",
        ),
    ] {
        common::assert_config_passes(spec, &run("config", spec, Some(file)));
    }
}

/// Runs `outbox relay --publisher SPEC` on one pending event with the
/// variables `env` (and no others of the SDK's), until `/readyz` reports
/// not ready with `expect` in its body; checks that no attempt was counted
/// and that neither `/readyz` nor the relay's output shows the secret.
async fn outage_on_readyz(spec: &str, env: &[(&str, String)], expect: &str) -> String {
    let (_db, pool, mut cmd, http_port) = common::one_event_relay(spec, "sqs-outage").await;
    let home = tempfile::tempdir().unwrap();
    for k in [
        "AWS_ENDPOINT_URL",
        "AWS_REGION",
        "AWS_DEFAULT_REGION",
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "AWS_PROFILE",
        "AWS_WEB_IDENTITY_TOKEN_FILE",
        "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
        "AWS_CONTAINER_CREDENTIALS_FULL_URI",
    ] {
        cmd.env_remove(k);
    }
    cmd.env("HOME", home.path())
        .env("AWS_CONFIG_FILE", home.path().join("config"))
        .env(
            "AWS_SHARED_CREDENTIALS_FILE",
            home.path().join("credentials"),
        )
        .env("AWS_EC2_METADATA_DISABLED", "true");
    for (k, v) in env {
        cmd.env(k, v);
    }
    common::assert_outage_on_readyz(
        cmd,
        &pool,
        http_port,
        &format!("{expect:?} for {spec}"),
        |body| body.contains(expect),
        SECRET,
        Duration::from_millis(1_000),
    )
    .await
}

/// An unknown queue, no region and no credentials are outages of the
/// running relay: `/readyz` says which, never the secret key, and no
/// attempt is counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_queue_missing_region_and_credentials_are_outages_on_readyz() {
    let Some(moto) = Moto::start_or_skip_blocking().await else {
        return;
    };
    let keys = |region: bool| {
        let mut env = vec![
            ("AWS_ENDPOINT_URL", moto.url()),
            ("AWS_ACCESS_KEY_ID", "AKIDTESTING".to_owned()),
            ("AWS_SECRET_ACCESS_KEY", SECRET.to_owned()),
        ];
        if region {
            env.push(("AWS_REGION", "us-east-1".to_owned()));
        }
        env
    };
    let mut bodies = Vec::new();
    bodies.push(
        outage_on_readyz(
            "sqs://no-such-queue.fifo",
            &keys(true),
            "no-such-queue.fifo",
        )
        .await,
    );
    bodies.push(outage_on_readyz("sqs://orders.fifo", &keys(false), "no AWS region").await);
    let no_keys = vec![
        ("AWS_ENDPOINT_URL", moto.url()),
        ("AWS_REGION", "us-east-1".to_owned()),
    ];
    bodies.push(outage_on_readyz("sqs://orders.fifo", &no_keys, "credentials").await);
    for body in bodies {
        eprintln!("/readyz: {}", body.trim());
    }
}
