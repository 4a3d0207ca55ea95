//! `outbox healthcheck` against a real `outbox relay`: exit 0 with one line
//! when it is ready, exit 1 with the reason when its broker is down or
//! nothing answers, the address from the flag or from `OUTBOX_HTTP_ADDR`.

mod common;

use std::process::{Output, Stdio};
use std::time::Duration;

use outbox_testkit::process::free_port;
use outbox_testkit::wait::wait_until_or_explain;

const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

fn healthcheck(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = common::bin();
    cmd.env_remove("OUTBOX_HTTP_ADDR")
        .env_remove("OUTBOX_CONFIG");
    cmd.envs(env.iter().copied()).arg("healthcheck").args(args);
    cmd.output().expect("run outbox healthcheck")
}

fn said(out: &Output) -> String {
    common::text(&out.stdout).trim_end().to_owned()
}

/// `outbox relay --publisher spec` on a fresh database, listening on every
/// interface at a free port.
async fn relay(spec: &str) -> (outbox_testkit::postgres::TestDb, tokio::process::Child, u16) {
    let (db, _pool) = outbox_testkit::postgres::migrated_test_db().await;
    let port = free_port();
    let mut cmd = common::bin();
    cmd.env("DATABASE_URL", &db.url)
        .env("OUTBOX_PUBLISHER_HTTP_SECRET", SECRET)
        .args(["relay", "--publisher", spec, "--instance-id", "probed"])
        .args(["--http-addr", &format!("0.0.0.0:{port}")])
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let child = tokio::process::Command::from(cmd)
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    (db, child, port)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ready_relay_passes_with_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let spec = format!("file:{}", dir.path().join("events.jsonl").display());
    let (_db, _relay, port) = relay(&spec).await;
    let addr = format!("0.0.0.0:{port}");
    wait_until_or_explain(
        "the relay to hold its partitions",
        Duration::from_secs(30),
        || async { said(&healthcheck(&["--http-addr", &addr], &[])).contains("32 of 32") },
        || async { said(&healthcheck(&["--http-addr", &addr], &[])) },
    )
    .await;
    for out in [
        healthcheck(&["--http-addr", &addr], &[]),
        healthcheck(&[], &[("OUTBOX_HTTP_ADDR", &addr)]),
    ] {
        assert!(out.status.success(), "{}", said(&out));
        assert_eq!(said(&out), "ready: running, 32 of 32 partitions held");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relay_whose_broker_is_down_fails_naming_the_publisher() {
    let closed = free_port();
    let (_db, _relay, port) = relay(&format!("http://127.0.0.1:{closed}/hook")).await;
    let addr = format!("127.0.0.1:{port}");
    wait_until_or_explain(
        "the relay to answer",
        Duration::from_secs(30),
        || async { said(&healthcheck(&["--http-addr", &addr], &[])).contains("publisher") },
        || async { said(&healthcheck(&["--http-addr", &addr], &[])) },
    )
    .await;
    let out = healthcheck(&["--http-addr", &addr], &[]);
    assert_eq!(out.status.code(), Some(1));
    let line = said(&out);
    assert!(line.starts_with("not ready: publisher http: "), "{line}");
    assert_eq!(line.lines().count(), 1, "{line}");
}

#[test]
fn nothing_listening_fails_saying_so() {
    let port = free_port();
    let out = healthcheck(&["--http-addr", &format!("127.0.0.1:{port}")], &[]);
    assert_eq!(out.status.code(), Some(1));
    let line = said(&out);
    assert!(
        line.starts_with(&format!("not ready: nothing answers on 127.0.0.1:{port}: ")),
        "{line}"
    );
    let out = healthcheck(&[], &[]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        common::text(&out.stderr).contains("pass --http-addr HOST:PORT"),
        "{}",
        common::text(&out.stderr)
    );
}

/// The address was echoed as given: an ANSI escape or a line break in
/// `--http-addr` reached the terminal raw. It is shown quoted, escaped.
#[test]
fn an_address_with_control_characters_is_shown_escaped() {
    let given = "\u{1b}[31mred\u{202e}\nline:1";
    let out = healthcheck(&["--http-addr", given, "--timeout-ms", "2000"], &[]);
    assert_eq!(out.status.code(), Some(1));
    let line = said(&out);
    assert!(
        !line.contains('\u{1b}') && !line.contains('\u{202e}') && line.lines().count() == 1,
        "{line:?}"
    );
    assert!(
        line.starts_with(r#"not ready: nothing answers on "\u{1b}[31mred\u{202e}\nline:1": "#),
        "{line:?}"
    );
}
