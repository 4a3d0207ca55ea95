//! A database password never shows: not in logs (text or JSON, at debug
//! and trace level), not in errors, not in `status` or `config check`
//! output, whether the URL comes from a flag, a variable or a file.

mod common;

use std::process::Output;

use outbox_testkit::postgres::{free_port, test_db};
use sqlx::Executor;

const SECRET: &str = "hunter2-secret";

/// `url` with its user and password replaced.
fn with_user(url: &str, user: &str, password: &str) -> String {
    let (scheme, rest) = url.split_once("://").unwrap();
    let host = rest.split_once('@').map_or(rest, |(_, host)| host);
    format!("{scheme}://{user}:{password}@{host}")
}

fn all_output(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Runs `args` with `env`, asserts the outcome (if `succeeds` says one)
/// and that the secret is nowhere; returns everything printed.
fn run_clean(env: &[(&str, &str)], args: &[&str], succeeds: impl Into<Option<bool>>) -> String {
    let out = common::bin()
        .envs(env.iter().copied())
        .args(args)
        .output()
        .unwrap();
    let text = all_output(&out);
    if let Some(succeeds) = succeeds.into() {
        assert_eq!(out.status.success(), succeeds, "{args:?}: {text}");
    }
    assert!(
        !text.contains(SECRET),
        "{args:?} printed the password:\n{text}"
    );
    assert!(!text.contains("panicked"), "{text}");
    text
}

#[tokio::test]
async fn the_password_never_appears_in_output_logs_or_errors() {
    let db = test_db().await;
    // A role with a password (the test cluster trusts 127.0.0.1, so any
    // password is accepted; what matters is what the program prints).
    let role = format!(
        "app_{}",
        &db.name.replace(|c: char| !c.is_ascii_alphanumeric(), "_")
    );
    {
        let mut admin = db.connect().await;
        admin
            .execute(format!("CREATE ROLE {role} LOGIN PASSWORD '{SECRET}'").as_str())
            .await
            .unwrap();
        admin
            .execute(format!("ALTER DATABASE \"{}\" OWNER TO {role}", db.name).as_str())
            .await
            .unwrap();
        admin
            .execute(format!("ALTER SCHEMA public OWNER TO {role}").as_str())
            .await
            .unwrap();
    }
    let url = with_user(&db.url, &role, SECRET);
    let redacted = format!("{role}:***@");
    let dir = tempfile::tempdir().unwrap();
    let sink = dir.path().join("events.jsonl");
    let debug = ["--log-level", "debug"];

    // migrate: URL as a flag, debug logs as text.
    run_clean(
        &[],
        &["migrate", "--database-url", &url, debug[0], debug[1]],
        true,
    );
    // Some events to relay.
    {
        let pool = db.pool().await;
        let events: Vec<_> = (0..50).map(|n| common::event("r", n)).collect();
        outbox::Outbox::new()
            .enqueue_many(&pool, &events)
            .await
            .unwrap();
    }
    // status and status --json: URL in DATABASE_URL, everything at trace.
    let env = [("DATABASE_URL", url.as_str()), ("RUST_LOG", "trace")];
    let status = run_clean(&env, &["status"], true);
    assert!(status.contains("pending:        50"), "{status}");
    run_clean(&env, &["status", "--json"], true);

    // relay: debug logs as JSON, with the HTTP server; it logs its
    // configuration, with the URL redacted.
    let port = free_port().to_string();
    let relay = run_clean(
        &[("OUTBOX_DATABASE_URL", url.as_str())],
        &[
            "--log-format",
            "json",
            debug[0],
            debug[1],
            "relay",
            "--drain",
            "--publisher",
            &format!("file:{}", sink.display()),
            "--http-addr",
            &format!("127.0.0.1:{port}"),
        ],
        true,
    );
    assert!(
        relay.contains("configuration loaded") && relay.contains(&redacted),
        "{relay}"
    );
    assert!(relay.contains("delivered 50 events"), "{relay}");
    assert_eq!(common::read_deliveries(&sink).len(), 50);

    // config check: URL in a file.
    let file = dir.path().join("outbox.toml");
    std::fs::write(&file, format!("database_url = \"{url}\"\n")).unwrap();
    let shown = run_clean(&[], &["config", "check", file.to_str().unwrap()], true);
    assert!(shown.contains(&redacted), "{shown}");

    // Failures: nothing listens there; a malformed URL. Then a broker URL
    // with credentials (refused, or unreachable, depending on the build's
    // publishers).
    let dead = format!("postgres://{role}:{SECRET}@127.0.0.1:{}/x", free_port());
    let err = run_clean(
        &[("DATABASE_URL", dead.as_str())],
        &["status", debug[0], debug[1]],
        false,
    );
    assert!(
        err.contains("cannot connect") && err.contains(&redacted),
        "{err}"
    );
    let err = run_clean(
        &[],
        &["relay", "--database-url", &dead, debug[0], debug[1]],
        false,
    );
    assert!(err.contains("cannot connect"), "{err}");
    let bad = format!("postgres://{role}:{SECRET}@127.0.0.1:notaport/x");
    let err = run_clean(&[("DATABASE_URL", bad.as_str())], &["migrate"], false);
    assert!(err.contains("invalid database URL"), "{err}");
    let broker = format!("amqp://guest:{SECRET}@127.0.0.1:1/vhost");
    run_clean(
        &[
            ("DATABASE_URL", url.as_str()),
            ("OUTBOX_PUBLISHER", broker.as_str()),
        ],
        &["relay", "--drain", debug[0], debug[1]],
        None,
    );
}
