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
use std::time::{Duration, Instant};

use outbox_testkit::postgres::test_db;
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";
const PASSWORD: &str = "pw-for-the-mounted-console";

/// A chromedriver process and one browser session on it.
struct Browser {
    /// Killed when the browser is dropped (`kill_on_drop`).
    _driver: Child,
    base: String,
    session: String,
    http: reqwest::Client,
    /// The browser's profile, removed with the test.
    _profile: tempfile::TempDir,
}

fn chromedriver() -> Option<String> {
    [
        "chromedriver",
        "/usr/bin/chromedriver",
        "/usr/lib/chromium/chromedriver",
    ]
    .into_iter()
    .find(|p| {
        std::process::Command::new(p)
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
            .kill_on_drop(true)
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
        // Chromium's sandbox needs user namespaces, which containers and
        // root lack.
        let args = [
            user_data.as_str(),
            "--headless=new",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--no-sandbox",
        ];
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
            _driver: driver,
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

    /// Clicks `button`, then waits for the page answering it to show
    /// `css`, and returns its text (the page left is marked first, so its
    /// own elements are never taken for the answer's).
    async fn click_and_read(&self, what: &str, button: &str, css: &str) -> String {
        self.script("window.__left = true; return null").await;
        self.click(button).await;
        let js = format!(
            "if (window.__left) return null; \
             var e = document.querySelector({}); return e ? e.innerText : null",
            json!(css)
        );
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(text) = self.script(&js).await.as_str() {
                return text.to_owned();
            }
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

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
