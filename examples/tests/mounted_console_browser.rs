//! The `mounted_console` example in a real browser: headless Chromium
//! driven over the WebDriver protocol (plain HTTP calls to
//! `chromedriver`), as `outbox console`'s own browser test drives it. From
//! the service's page to the console under `/outbox`: sign in, the
//! overview, the events and one event, pause and resume, sign out; every
//! link, form, redirect and asset under `/outbox/`.
//!
//! Skipped, saying so, when `chromedriver` is not installed (Debian:
//! `chromium chromium-driver`, which `scripts/test` installs).

use std::process::Stdio;
use std::time::Duration;

use outbox_testkit::browser::{chromedriver, Browser};
use outbox_testkit::postgres::test_db;
use serde_json::json;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

const PASSWORD: &str = "pw-for-the-mounted-console";

/// Starts the example on a free port with the console's password; the
/// service's address, once it serves.
async fn start_example(database_url: &str) -> (Child, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_mounted_console"))
        .args(["--serve", "127.0.0.1:0"])
        .env("DATABASE_URL", database_url)
        .env("OUTBOX_CONSOLE_PASSWORD", PASSWORD)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("start mounted_console");
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let read = async {
        while let Some(line) = lines.next_line().await.unwrap() {
            if let Some(rest) = line.split_once("the service on ").map(|(_, r)| r) {
                return rest.split('/').take(3).collect::<Vec<_>>().join("/");
            }
        }
        panic!("mounted_console ended before serving");
    };
    let base = tokio::time::timeout(Duration::from_secs(60), read)
        .await
        .expect("mounted_console did not start serving within 60 s");
    // Keep draining its stderr so it never blocks on a full pipe.
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    (child, base)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_serves_the_console_under_outbox_with_its_sign_in_and_headers() {
    let db = test_db().await;
    let (_service, base) = start_example(&db.url).await;
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();

    // The service's own routes are its own; the console answers only
    // under /outbox, with its headers.
    let health = http.get(format!("{base}/healthz")).send().await.unwrap();
    assert_eq!(health.status(), 200);
    assert!(health.headers().get("content-security-policy").is_none());
    let r = http.get(format!("{base}/outbox/")).send().await.unwrap();
    assert_eq!(r.status(), 303);
    assert_eq!(r.headers()["location"], "/outbox/login");
    let r = http
        .get(format!("{base}/outbox/login"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let csp = r.headers()["content-security-policy"].to_str().unwrap();
    assert!(csp.contains("frame-ancestors 'none'"), "{csp}");
    assert_eq!(r.headers()["x-frame-options"], "DENY");
    let page = r.text().await.unwrap();
    assert!(page.contains(r#"action="/outbox/login""#), "{page}");
    assert!(
        page.contains(r#"href="/outbox/assets/console.css""#),
        "{page}"
    );
    let r = http
        .get(format!("{base}/outbox/assets/console.js"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let r = http.get(format!("{base}/outboxes")).send().await.unwrap();
    assert_eq!(r.status(), 404);
    assert!(r.headers().get("content-security-policy").is_none());
    // The session cookie is the console's alone.
    let r = http
        .post(format!("{base}/outbox/login"))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!("password={PASSWORD}"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 303);
    assert_eq!(r.headers()["location"], "/outbox/");
    let cookie = r.headers()["set-cookie"].to_str().unwrap();
    assert!(cookie.contains("; Path=/outbox;"), "{cookie}");
    assert!(cookie.contains("HttpOnly"), "{cookie}");

    let Some(driver_bin) = chromedriver() else {
        println!("SKIPPED (the browser part): chromedriver not found; install Debian's chromium and chromium-driver (scripts/test does)");
        return;
    };
    let b = Browser::start(&driver_bin).await;

    // From the service's page to the console's sign-in.
    b.go(&format!("{base}/")).await;
    b.click("a#console").await;
    b.wait_for(
        "the sign-in page",
        "return location.pathname === '/outbox/login'",
    )
    .await;
    b.type_in("input[name=password]", "wrong").await;
    b.click("button[type=submit]").await;
    b.wait_for("the refusal", "return !!document.querySelector('p.error')")
        .await;
    assert_eq!(b.text("p.error").await, "Wrong password.");
    b.type_in("input[name=password]", PASSWORD).await;
    b.click("button[type=submit]").await;
    b.wait_for(
        "the overview",
        "return location.pathname === '/outbox/' && !!document.querySelector('.figures')",
    )
    .await;
    assert_eq!(b.text("[data-figure=pending]").await, "3");
    // Its stylesheet loaded from under /outbox, under the CSP.
    assert_eq!(
        b.script(
            "var s = document.styleSheets[0]; \
             return !!s && s.href.endsWith('/outbox/assets/console.css') && s.cssRules.length > 0"
        )
        .await,
        json!(true)
    );
    // The refresh script fetches the figures from under /outbox too.
    b.wait_for(
        "the figures to refresh",
        "return !!document.querySelector('[data-refreshed]')",
    )
    .await;

    // The navigation, a search form, and an event's page.
    b.click("nav a[href='/outbox/events']").await;
    b.wait_for(
        "the events page",
        "return location.pathname === '/outbox/events' && !!document.querySelector('form.search')",
    )
    .await;
    b.type_in("input[name=aggregate_type]", "order").await;
    b.click("form.search button[type=submit]").await;
    b.wait_for(
        "the orders' events",
        "return document.querySelectorAll('main table tbody tr').length === 3",
    )
    .await;
    assert_eq!(
        b.script(
            "return location.pathname === '/outbox/events' \
             && location.search.includes('aggregate_type=order')"
        )
        .await,
        json!(true)
    );
    b.click("main table tbody tr td:nth-child(2) a").await;
    b.wait_for(
        "an event's page",
        "return location.pathname.startsWith('/outbox/events/') && !!document.getElementById('payload')",
    )
    .await;
    let payload = b.text("#payload").await;
    assert!(payload.contains("\"customer\""), "{payload}");
    b.click("dl.detail a").await;
    b.wait_for(
        "the aggregate's history",
        "return location.pathname === '/outbox/events' && document.querySelectorAll('main table tbody tr').length === 1",
    )
    .await;

    // Actions post to /outbox/… with their CSRF token and come back.
    b.click("nav a[href='/outbox/']").await;
    b.wait_for(
        "the overview again",
        "return location.pathname === '/outbox/'",
    )
    .await;
    b.click("select[name=scope] option[value=all]").await;
    assert_eq!(
        b.click_and_read(
            "the pause",
            "form[action='/outbox/pause'] button",
            "p.notice"
        )
        .await,
        "Delivery paused for everything."
    );
    assert_eq!(
        b.click_and_read(
            "the resume",
            "form[action='/outbox/resume'] button",
            "p.notice"
        )
        .await,
        "Delivery resumed for everything."
    );

    b.click("form.signout button").await;
    b.wait_for(
        "the sign-in page after signing out",
        "return location.pathname === '/outbox/login'",
    )
    .await;
    b.go(&format!("{base}/outbox/events")).await;
    b.wait_for(
        "the sign-in page for a signed-out browser",
        "return location.pathname === '/outbox/login'",
    )
    .await;
    b.call(reqwest::Method::DELETE, "", None).await;
}
