//! `outbox relay --console`: the web console on the relay's `--http-addr`
//! server beside /metrics, /healthz and /readyz, under the rules of
//! `outbox console` (loopback without a password, a password off it).

mod common;
mod console_support;

use std::process::{Child, Stdio};
use std::time::Duration;

use console_support::{client, csrf};
use outbox_testkit::postgres::migrated_test_db;

struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test]
async fn the_relay_serves_the_console_beside_its_probes_and_counts_its_actions() {
    let (db, pool) = migrated_test_db().await;
    let port = outbox_testkit::process::free_port();
    let relay = common::bin()
        .env("DATABASE_URL", &db.url)
        .env_remove("OUTBOX_CONSOLE_PASSWORD")
        .args(["relay", "--publisher", "stdout", "--console"])
        .args(["--http-addr", &format!("127.0.0.1:{port}")])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let _relay = Killed(relay);
    let base = format!("http://127.0.0.1:{port}");
    let c = client();
    outbox_testkit::wait_until("the relay's console", Duration::from_secs(30), || {
        let (c, url) = (c.clone(), format!("{base}/"));
        async move { c.get(url).send().await.is_ok_and(|r| r.status() == 200) }
    })
    .await;
    let overview = c.get(format!("{base}/")).send().await.unwrap();
    assert!(overview.headers().contains_key("server-timing"));
    let page = overview.text().await.unwrap();
    assert!(page.contains("Overview") && page.contains("data-figure=\"pending\""));
    let (status, _) = common::http_get(port, "/readyz").await.unwrap();
    assert!(
        status == 200 || status == 503,
        "the relay's own probe: {status}"
    );

    let token = csrf(&page);
    let r = c
        .post(format!("{base}/pause"))
        .form(&[("scope", "all"), ("csrf", token.as_str())])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 303);
    let paused: i64 = sqlx::query_scalar("SELECT count(*) FROM outbox_pauses")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(paused, 1);
    // One exposition: the relay's metrics and the console's counters.
    let (_, metrics) = common::http_get(port, "/metrics").await.unwrap();
    assert!(metrics.contains("outbox_relay_info"), "{metrics}");
    assert!(
        metrics.contains(r#"outbox_console_actions_total{action="pause",outcome="changed"} 1"#),
        "{metrics}"
    );
    assert_eq!(metrics.matches("# EOF").count(), 1, "{metrics}");
    // A method the probes do not take: 405 naming the ones they do.
    let r = c.post(format!("{base}/healthz")).send().await.unwrap();
    assert_eq!(r.status(), 405);
    assert_eq!(r.headers()["allow"], "GET, HEAD");
    let r = c.delete(format!("{base}/stuck")).send().await.unwrap();
    assert_eq!(r.status(), 405);
    assert_eq!(r.headers()["allow"], "GET, HEAD");
}

#[tokio::test]
async fn off_loopback_the_relay_refuses_a_console_without_a_password() {
    let (db, _pool) = migrated_test_db().await;
    let port = outbox_testkit::process::free_port();
    let out = common::bin()
        .env("DATABASE_URL", &db.url)
        .env_remove("OUTBOX_CONSOLE_PASSWORD")
        .args(["relay", "--publisher", "stdout", "--console"])
        .args(["--http-addr", &format!("0.0.0.0:{port}")])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = common::text(&out.stderr);
    assert!(err.contains("OUTBOX_CONSOLE_PASSWORD"), "{err}");

    let out = common::bin()
        .env("DATABASE_URL", &db.url)
        .args(["relay", "--publisher", "stdout", "--console"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(common::text(&out.stderr).contains("--http-addr"));
}
