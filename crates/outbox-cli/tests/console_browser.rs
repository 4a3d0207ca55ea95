//! `outbox console` in a real browser: headless Chromium driven over the
//! WebDriver protocol (plain HTTP calls to `chromedriver`). Signs in, reads
//! the figures as the refresh script updates them under the strict CSP,
//! sees hostile rows as text with no script run, retries a ticked dead
//! letter through the confirmation, pauses and resumes delivery.
//!
//! Skipped, saying so, when `chromedriver` is not installed (Debian:
//! `chromium chromium-driver`, which `scripts/test` installs). With
//! `OUTBOX_CONSOLE_SCREENSHOTS=DIR` it also saves PNGs of the pages there
//! (docs/console.md shows them; its "Screenshots" section says how to
//! make them again).

mod console_support;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine;
use console_support::{count, insert, start};
use outbox_testkit::postgres::migrated_test_db;
use serde_json::{json, Value};

const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

/// A chromedriver process and one browser session on it.
struct Browser {
    driver: Child,
    base: String,
    session: String,
    http: reqwest::Client,
    /// The browser's profile, removed with the test (Chromium leaves its
    /// own temporary one behind when its driver is killed).
    _profile: tempfile::TempDir,
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

fn chromedriver() -> Option<String> {
    [
        "chromedriver",
        "/usr/bin/chromedriver",
        "/usr/lib/chromium/chromedriver",
    ]
    .into_iter()
    .find(|p| {
        Command::new(p)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
    })
    .map(str::to_owned)
}

impl Browser {
    async fn start(driver_bin: &str) -> Browser {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let driver = Command::new(driver_bin)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start chromedriver");
        let base = format!("http://127.0.0.1:{port}");
        let http = reqwest::Client::new();
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(r) = http.get(format!("{base}/status")).send().await {
                let v: Value = r.json().await.unwrap_or_default();
                if v["value"]["ready"] == true {
                    break;
                }
            }
            assert!(Instant::now() < deadline, "chromedriver did not start");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let profile = tempfile::tempdir().unwrap();
        let user_data = format!("--user-data-dir={}", profile.path().display());
        let mut args = vec![
            user_data.as_str(),
            "--headless=new",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            // Modest, so the screenshots in docs/console/ stay small.
            "--window-size=1100,760",
        ];
        // Chromium's sandbox needs user namespaces, which containers and
        // root lack.
        args.push("--no-sandbox");
        let caps = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {"args": args},
        }}});
        let v: Value = http
            .post(format!("{base}/session"))
            .json(&caps)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let session = v["value"]["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("no session: {v}"))
            .to_owned();
        Browser {
            driver,
            base,
            session,
            http,
            _profile: profile,
        }
    }

    async fn call(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> Value {
        let url = format!("{}/session/{}{path}", self.base, self.session);
        let mut req = self.http.request(method, url);
        if let Some(b) = body {
            req = req.json(&b);
        }
        let v: Value = req.send().await.unwrap().json().await.unwrap();
        if v["value"].get("error").is_some() {
            panic!("webdriver {path}: {}", v["value"]);
        }
        v["value"].clone()
    }

    async fn go(&self, url: &str) {
        self.call(reqwest::Method::POST, "/url", Some(json!({"url": url})))
            .await;
    }

    async fn find(&self, css: &str) -> String {
        let v = self
            .call(
                reqwest::Method::POST,
                "/element",
                Some(json!({"using": "css selector", "value": css})),
            )
            .await;
        v[ELEMENT].as_str().unwrap().to_owned()
    }

    async fn click(&self, css: &str) {
        let e = self.find(css).await;
        self.call(
            reqwest::Method::POST,
            &format!("/element/{e}/click"),
            Some(json!({})),
        )
        .await;
    }

    async fn type_in(&self, css: &str, text: &str) {
        let e = self.find(css).await;
        self.call(
            reqwest::Method::POST,
            &format!("/element/{e}/value"),
            Some(json!({"text": text})),
        )
        .await;
    }

    async fn text(&self, css: &str) -> String {
        let e = self.find(css).await;
        self.call(reqwest::Method::GET, &format!("/element/{e}/text"), None)
            .await
            .as_str()
            .unwrap()
            .to_owned()
    }

    async fn script(&self, js: &str) -> Value {
        self.call(
            reqwest::Method::POST,
            "/execute/sync",
            Some(json!({"script": js, "args": []})),
        )
        .await
    }

    /// Clicks `button`, then waits up to 20 s for the page that answers it
    /// to show an element matching `css`, and returns its text. The page
    /// the click left is marked first, so its own notice (the previous
    /// action's) is never taken for the answer. The text is read in the
    /// same script that found the element: the overview's refresh may
    /// replace it a moment later (a notice shown once is gone after it),
    /// so a second look could miss it on a slow machine.
    async fn click_and_read(&self, what: &str, button: &str, css: &str) -> String {
        self.script("window.__outbox_left = true; return null")
            .await;
        self.click(button).await;
        let js = format!(
            "if (window.__outbox_left) return null; \
             var e = document.querySelector({}); return e ? e.innerText : null",
            json!(css)
        );
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(text) = self.script(&js).await.as_str() {
                return text.to_owned();
            }
            if Instant::now() > deadline {
                panic!("timed out waiting for {what}");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Waits up to 20 s for `js` to return true.
    async fn wait_for(&self, what: &str, js: &str) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while self.script(js).await != json!(true) {
            if Instant::now() > deadline {
                let page = self
                    .script("return location.href + '\\n' + document.body.innerText")
                    .await;
                panic!("timed out waiting for {what}; the page: {page}");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn screenshot(&self, name: &str) {
        let Ok(dir) = std::env::var("OUTBOX_CONSOLE_SCREENSHOTS") else {
            return;
        };
        let png = self.call(reqwest::Method::GET, "/screenshot", None).await;
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(png.as_str().unwrap())
            .unwrap();
        std::fs::write(
            std::path::Path::new(&dir).join(format!("{name}.png")),
            bytes,
        )
        .unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_browser_signs_in_reads_the_pages_and_fixes_a_dead_letter_with_no_hostile_script_run() {
    let Some(driver_bin) = chromedriver() else {
        println!("SKIPPED: chromedriver not found; install Debian's chromium and chromium-driver (scripts/test does)");
        return;
    };
    let (db, pool) = migrated_test_db().await;
    // Hostile rows: each would set window.pwned if its text ran as HTML.
    sqlx::query(
        "INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload, attempts,
                                    last_error, dead_lettered_at)
         VALUES ('order', '<img src=x onerror=\"window.pwned=1\">', 'order.paid',
                 '{\"html\": \"<script>window.pwned=2</script>\", \"big\": 1e400}', 10,
                 '\"><svg onload=window.pwned=3>', now() - interval '1 hour')",
    )
    .execute(&pool)
    .await
    .unwrap();
    for n in 1..=3 {
        insert(&pool, "poison", n, true).await;
    }
    for n in 1..=5 {
        insert(&pool, &format!("ok-{n}"), 1, false).await;
    }
    let console = start(
        &db.url,
        &[],
        &[("OUTBOX_CONSOLE_PASSWORD", "pw-for-the-browser")],
    );
    let b = Browser::start(&driver_bin).await;

    b.go(&console.url("/")).await;
    b.wait_for("the sign-in page", "return location.pathname === '/login'")
        .await;
    b.screenshot("sign-in").await;
    b.type_in("input[name=password]", "wrong").await;
    b.click("button[type=submit]").await;
    b.wait_for("the refusal", "return !!document.querySelector('p.error')")
        .await;
    assert_eq!(b.text("p.error").await, "Wrong password.");
    b.type_in("input[name=password]", "pw-for-the-browser")
        .await;
    b.click("button[type=submit]").await;
    b.wait_for(
        "the overview",
        "return location.pathname === '/' && !!document.querySelector('.figures')",
    )
    .await;
    assert_eq!(b.text("[data-figure=pending]").await, "5");
    assert_eq!(b.text("[data-figure=dead_letters]").await, "4");
    // The refresh script runs under the CSP and updates the figures.
    sqlx::query("DELETE FROM outbox_events WHERE aggregate_id = 'ok-1'")
        .execute(&pool)
        .await
        .unwrap();
    b.wait_for(
        "the figures to refresh",
        "return document.querySelector('[data-figure=pending]').textContent === '4'",
    )
    .await;
    b.screenshot("overview").await;

    b.go(&console.url("/stuck")).await;
    b.screenshot("stuck").await;
    let stuck = b.text("main table").await;
    assert!(
        stuck.contains(r#"order/<img src=x onerror="window.pwned=1">"#),
        "{stuck}"
    );
    assert!(
        stuck.contains(r#""><svg onload=window.pwned=3>"#),
        "{stuck}"
    );
    b.click("main table tbody tr td:nth-child(2) a").await;
    b.wait_for(
        "the event page",
        "return !!document.getElementById('payload')",
    )
    .await;
    b.screenshot("event").await;
    let payload = b.text("#payload").await;
    assert!(
        payload.contains("<script>window.pwned=2</script>"),
        "{payload}"
    );
    assert!(
        payload.contains(&format!("1{}", "0".repeat(400))),
        "{payload}"
    );

    b.go(&console.url("/events?aggregate_type=order&aggregate_id=poison"))
        .await;
    b.wait_for(
        "the aggregate's history",
        "return document.querySelectorAll('main table tbody tr').length === 3",
    )
    .await;
    b.screenshot("events").await;

    b.go(&console.url("/dead-letters?aggregate_id=poison"))
        .await;
    b.screenshot("dead-letters").await;
    b.click("input[type=checkbox][name=id]").await;
    b.click("button[value=retry]").await;
    b.wait_for(
        "the confirmation",
        "return !!document.getElementById('confirm-count')",
    )
    .await;
    assert_eq!(b.text("#confirm-count").await, "1");
    b.screenshot("confirm").await;
    assert!(b
        .click_and_read("the outcome", "main form button[type=submit]", "p.notice")
        .await
        .starts_with("Retried 1 dead letter"));
    assert_eq!(
        count(
            &pool,
            "SELECT count(*) FROM outbox_dead_letters WHERE aggregate_id = 'poison'"
        )
        .await,
        2
    );

    b.go(&console.url("/")).await;
    b.click("select[name=scope] option[value=all]").await;
    assert_eq!(
        b.click_and_read("the pause", "form[action='/pause'] button", "p.notice")
            .await,
        "Delivery paused for everything."
    );
    assert_eq!(
        count(
            &pool,
            "SELECT count(*) FROM outbox_pauses WHERE aggregate_type IS NULL"
        )
        .await,
        1
    );
    assert_eq!(
        b.click_and_read("the resume", "form[action='/resume'] button", "p.notice")
            .await,
        "Delivery resumed for everything."
    );
    assert_eq!(count(&pool, "SELECT count(*) FROM outbox_pauses").await, 0);

    // No hostile text ran anywhere along the way.
    assert_eq!(
        b.script("return window.pwned === undefined").await,
        json!(true)
    );
    b.call(reqwest::Method::DELETE, "", None).await;
}
