//! A headless Chromium driven over the WebDriver protocol (plain HTTP calls
//! to `chromedriver`), for the console's browser tests: start it, go to a
//! page, find, click, type, read, run a script, wait, take a screenshot.
//! [`chromedriver`] says whether one is installed (Debian: `chromium
//! chromium-driver`), so a test can skip, saying so.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine;
use serde_json::{json, Value};

const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

/// A chromedriver process and one browser session on it.
pub struct Browser {
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

/// The installed `chromedriver`, if any.
pub fn chromedriver() -> Option<String> {
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
    /// Starts `driver_bin` on a free port and opens a headless session
    /// with a throwaway profile.
    pub async fn start(driver_bin: &str) -> Browser {
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

    /// One WebDriver command on the session; panics on a WebDriver error.
    pub async fn call(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> Value {
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

    /// Opens `url`.
    pub async fn go(&self, url: &str) {
        self.call(reqwest::Method::POST, "/url", Some(json!({"url": url})))
            .await;
    }

    /// The element matching `css` (its WebDriver id).
    pub async fn find(&self, css: &str) -> String {
        let v = self
            .call(
                reqwest::Method::POST,
                "/element",
                Some(json!({"using": "css selector", "value": css})),
            )
            .await;
        v[ELEMENT].as_str().unwrap().to_owned()
    }

    /// Clicks the element matching `css`.
    pub async fn click(&self, css: &str) {
        let e = self.find(css).await;
        self.call(
            reqwest::Method::POST,
            &format!("/element/{e}/click"),
            Some(json!({})),
        )
        .await;
    }

    /// Types `text` into the element matching `css`.
    pub async fn type_in(&self, css: &str, text: &str) {
        let e = self.find(css).await;
        self.call(
            reqwest::Method::POST,
            &format!("/element/{e}/value"),
            Some(json!({"text": text})),
        )
        .await;
    }

    /// The visible text of the element matching `css`.
    pub async fn text(&self, css: &str) -> String {
        let e = self.find(css).await;
        self.call(reqwest::Method::GET, &format!("/element/{e}/text"), None)
            .await
            .as_str()
            .unwrap()
            .to_owned()
    }

    /// Runs `js` in the page; what it returns.
    pub async fn script(&self, js: &str) -> Value {
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
    pub async fn click_and_read(&self, what: &str, button: &str, css: &str) -> String {
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
    pub async fn wait_for(&self, what: &str, js: &str) {
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

    /// Saves a PNG of the page as `name.png` in the directory the
    /// environment variable `OUTBOX_CONSOLE_SCREENSHOTS` names, if it is
    /// set (docs/console.md's screenshots are made so).
    pub async fn screenshot(&self, name: &str) {
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
