//! What guards `outbox console` beyond sign-in and what it records: a
//! console without a password answers only requests addressed to a
//! loopback name, so a page elsewhere that points its own domain at
//! 127.0.0.1 (DNS rebinding) cannot read or drive it; every action, done
//! or refused, is counted at `/metrics` and logged.

mod common;
mod console_support;

use console_support::{client, confirm_and_apply, csrf, get, post, start};
use outbox_testkit::postgres::migrated_test_db;

async fn status_with_host(c: &reqwest::Client, url: &str, host: &str) -> u16 {
    c.get(url)
        .header("host", host)
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
}

#[tokio::test]
async fn without_a_password_only_a_loopback_host_is_answered() {
    let (db, _pool) = migrated_test_db().await;
    let console = start(&db.url, &[], &[]);
    let port = console.base.rsplit(':').next().unwrap().to_owned();
    let c = client();
    for (host, expected) in [
        (format!("127.0.0.1:{port}"), 200),
        (format!("localhost:{port}"), 200),
        (format!("rebound.example:{port}"), 403),
        (format!("localhost.rebound.example:{port}"), 403),
    ] {
        for path in ["/", "/overview.json", "/dead-letters"] {
            assert_eq!(
                status_with_host(&c, &console.url(path), &host).await,
                expected,
                "{host}{path}"
            );
        }
    }
    // A rebound page cannot post either (and learns no CSRF token).
    let r = c
        .post(console.url("/pause"))
        .header("host", format!("rebound.example:{port}"))
        .form(&[("scope", "all")])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    assert!(r.text().await.unwrap().contains("loopback"));
    assert!(
        console
            .log()
            .iter()
            .any(|l| l.contains("not a loopback Host")),
        "{:?}",
        console.log()
    );
}

#[tokio::test]
async fn with_a_password_any_host_reaches_the_sign_in() {
    let (db, _pool) = migrated_test_db().await;
    let console = start(&db.url, &[], &[("OUTBOX_CONSOLE_PASSWORD", "pw")]);
    let c = client();
    // Behind a proxy the Host is the proxy's name; the password guards it.
    let r = c
        .get(console.url("/"))
        .header("host", "console.example.com")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 303, "to the sign-in page");
}

fn series(metrics: &str, action: &str, outcome: &str) -> f64 {
    let key = format!(r#"outbox_console_actions_total{{action="{action}",outcome="{outcome}"}} "#);
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(key.as_str()))
        .map(|v| v.parse().unwrap())
        .unwrap_or(0.0)
}

#[tokio::test]
async fn every_action_done_or_refused_is_counted_and_logged() {
    let (db, pool) = migrated_test_db().await;
    console_support::insert(&pool, "a", 1, true).await;
    let console = start(&db.url, &[], &[("OUTBOX_CONSOLE_PASSWORD", "pw")]);
    let c = client();
    let (status, _, _) = post(&c, &console, "/login", &[("password", "nope")]).await;
    assert_eq!(status, 401);
    let (status, _, _) = post(&c, &console, "/login", &[("password", "pw")]).await;
    assert_eq!(status, 303);
    let (_, page) = get(&c, &console, "/").await;
    let token = csrf(&page);
    let pause = [
        ("scope", "type"),
        ("aggregate_type", "order"),
        ("csrf", &token),
    ];
    post(&c, &console, "/pause", &pause).await;
    post(&c, &console, "/pause", &pause).await;
    let (status, _, _) = post(&c, &console, "/resume", &[("scope", "all")]).await;
    assert_eq!(status, 403, "no CSRF token");
    let bad = [
        ("action", "retry"),
        ("scope", "everything"),
        ("csrf", &token),
    ];
    let (status, _, _) = post(&c, &console, "/dead-letters/apply", &bad).await;
    assert_eq!(status, 400);
    let retry = [("action", "retry"), ("scope", "matching"), ("csrf", &token)];
    let (status, _, _) = confirm_and_apply(&c, &console, &retry).await;
    assert_eq!(status, 303);

    // Scraped without a session, as Prometheus does.
    let r = reqwest::get(console.url("/metrics")).await.unwrap();
    assert_eq!(r.status(), 200);
    let m = r.text().await.unwrap();
    assert_eq!(series(&m, "sign_in", "refused"), 1.0, "{m}");
    assert_eq!(series(&m, "sign_in", "changed"), 1.0, "{m}");
    assert_eq!(series(&m, "pause", "changed"), 1.0, "{m}");
    assert_eq!(series(&m, "pause", "unchanged"), 1.0, "{m}");
    assert_eq!(series(&m, "resume", "refused"), 1.0, "{m}");
    assert_eq!(series(&m, "retry", "refused"), 1.0, "{m}");
    assert_eq!(series(&m, "retry", "changed"), 1.0, "{m}");
    // And the log says who did what to which, and how many.
    let log = console.log().join("\n");
    assert!(
        log.contains("console delivery action")
            && log.contains("scope=aggregate type order")
            && log.contains("console dead-letter action")
            && log.contains("count=1")
            && log.contains("peer=127.0.0.1"),
        "{log}"
    );
}
