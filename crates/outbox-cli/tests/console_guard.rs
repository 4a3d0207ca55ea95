//! What guards `outbox console` beyond sign-in: a console without a
//! password answers only requests addressed to a loopback name, so a page
//! elsewhere that points its own domain at 127.0.0.1 (DNS rebinding)
//! cannot read or drive it.

mod common;
mod console_support;

use console_support::{client, start};
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
