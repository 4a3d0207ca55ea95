//! The `outbox` program publishing to an HTTP webhook, end to end: events
//! written by plain SQL, `outbox relay --drain --publisher http://…` run as
//! a child process, every request checked by the test kit's receiver (which
//! verifies each Standard Webhooks signature); and what bad webhook
//! settings do to `config check`, `relay` and `/readyz`.

mod common;

use common::http_get as get;

use std::process::Stdio;
use std::time::{Duration, Instant};

use outbox_testkit::webhook::Receiver;

const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
const SECRET_ENV: &str = "OUTBOX_PUBLISHER_HTTP_SECRET";
const AGGREGATES: i64 = 50;
const PER_AGGREGATE: i64 = 40;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relay_program_delivers_signed_webhooks_end_to_end() {
    let receiver = Receiver::start(SECRET).await;
    let (db, pool) = outbox_testkit::postgres::migrated_test_db().await;
    let expected = common::insert_backlog(&pool, AGGREGATES, PER_AGGREGATE).await;

    let mut cmd = common::bin();
    cmd.env("DATABASE_URL", &db.url)
        .env(SECRET_ENV, SECRET)
        .args(["relay", "--drain", "--publisher", &receiver.url("/hook")])
        .args(["--instance-id", "webhook-e2e"]);
    let (took, stderr) = common::drain(cmd, &pool).await;
    assert!(
        !stderr.contains("MfKQ9r8"),
        "the secret was printed: {stderr}"
    );

    receiver.assert_all_signed();
    let deliveries = receiver.deliveries();
    let mut first = Vec::with_capacity(deliveries.len());
    for d in &deliveries {
        let id = d.event_id().expect("every request carries outbox-event-id");
        assert_eq!(
            d.headers["webhook-id"],
            id.to_string(),
            "webhook-id is the event id"
        );
        let (aggregate, n) = expected
            .get(&id)
            .unwrap_or_else(|| panic!("event {id} was never written"));
        assert_eq!(&d.headers["outbox-aggregate-id"], aggregate);
        assert_eq!(d.path, "/hook");
        let body: serde_json::Value = serde_json::from_slice(&d.body).unwrap();
        assert_eq!(body, serde_json::json!({ "n": n }));
        assert!(d.headers["traceparent"].starts_with("00-4bf92f"));
        first.push((id, aggregate.as_str(), *n));
    }
    let duplicates = outbox_testkit::assert_delivered_once_in_order(
        "outbox relay to a webhook: ",
        expected.keys(),
        &first,
    );
    eprintln!(
        "webhook e2e: {} events in {took:.2?} ({:.0}/s), {} requests, {duplicates} duplicates, every signature valid",
        expected.len(),
        expected.len() as f64 / took.as_secs_f64(),
        deliveries.len()
    );
}

/// Runs `outbox config check` or `relay` with `spec` and the signing
/// secret `secret` (none: the variable is removed).
fn run(command: &str, spec: &str, secret: Option<&str>) -> std::process::Output {
    common::run_settings(command, spec, None, &[(SECRET_ENV, secret)])
}

#[test]
fn bad_webhook_settings_are_one_clear_line_and_never_show_secrets() {
    let cases: &[(&str, Option<&str>, &[&str])] = &[
        (
            "http://[::1/hook",
            Some(SECRET),
            &["url", "cannot be parsed"],
        ),
        (
            "http://127.0.0.1:99999/hook",
            Some(SECRET),
            &["url", "HOST"],
        ),
        (
            "http://u:hunter2@127.0.0.1:99999/hook",
            Some(SECRET),
            &["url"],
        ),
        (
            "http:/127.0.0.1/hook",
            Some(SECRET),
            &["unknown", "http[s]://"],
        ),
        (
            "https://{event_type}.example.com/",
            Some(SECRET),
            &["url", "host"],
        ),
        (
            "http://127.0.0.1:8080/hook",
            None,
            &["secret", "missing", SECRET_ENV],
        ),
        (
            "http://127.0.0.1:8080/hook",
            Some("hunter2hunter2hunter2hunter2"),
            &["secret", "whsec_"],
        ),
        (
            "http://127.0.0.1:8080/hook",
            Some("whsec_hunter2!"),
            &["secret", "base64"],
        ),
        (
            "http://127.0.0.1:8080/hook",
            Some("whsec_aHVudGVyMg=="),
            &["secret", "7 bytes"],
        ),
    ];
    common::assert_bad_settings_fail_in_one_line(
        cases,
        "secret",
        &["hunter2", "aHVudGVy", "MfKQ9r8"],
        run,
    );
    // A good one passes, and config check shows no secret.
    let out = run(
        "config",
        "https://u:hunter2@hooks.example.com/{topic}",
        Some(SECRET),
    );
    let stdout = common::assert_config_passes("the good url", &out);
    assert!(stdout.contains("http[s]://HOST[:PORT]/PATH"), "{stdout}");
    assert!(
        !stdout.contains("hunter2") && !stdout.contains("MfKQ9r8"),
        "{stdout}"
    );
}

async fn wait_for<T, F: std::future::Future<Output = Option<T>>>(
    what: &str,
    limit: Duration,
    mut probe: impl FnMut() -> F,
) -> T {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(v) = probe().await {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {limit:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// An endpoint that refuses connections is an outage: `/readyz` says so
/// (without the URL's password or the secret), no attempt is counted, and
/// the relay keeps trying until the endpoint is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_endpoint_is_an_outage_on_readyz_then_delivers() {
    let receiver = Receiver::start(SECRET).await;
    receiver.stop();
    let spec = format!("http://u:hunter2@127.0.0.1:{}/hook", receiver.port());
    let (_db, pool, mut cmd, http_port) = common::one_event_relay(&spec, "webhook-outage").await;
    cmd.env(SECRET_ENV, SECRET)
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let mut child = tokio::process::Command::from(cmd)
        .kill_on_drop(true)
        .spawn()
        .expect("spawn outbox relay");

    let body = wait_for(
        "/readyz to report the outage",
        Duration::from_secs(60),
        || async {
            get(http_port, "/readyz")
                .await
                .filter(|(status, body)| {
                    *status == 503 && body.contains(&receiver.port().to_string())
                })
                .map(|(_, body)| body)
        },
    )
    .await;
    assert!(
        !body.contains("hunter2") && !body.contains("MfKQ9r8"),
        "{body}"
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    let attempts: i32 = sqlx::query_scalar("SELECT attempts FROM outbox_events")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(attempts, 0, "an outage counts no attempt");

    receiver.start_again().await;
    wait_for(
        "the event to be delivered",
        Duration::from_secs(60),
        || async { (!receiver.deliveries().is_empty()).then_some(()) },
    )
    .await;
    wait_for("/readyz to recover", Duration::from_secs(60), || async {
        get(http_port, "/readyz").await.filter(|(s, _)| *s == 200)
    })
    .await;
    receiver.assert_all_signed();
    child.kill().await.unwrap();
    let out = child.wait_with_output().await.unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !stderr.contains("hunter2") && !stderr.contains("MfKQ9r8"),
        "{stderr}"
    );
}
