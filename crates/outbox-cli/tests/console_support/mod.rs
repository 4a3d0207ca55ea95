//! Shared by the console's tests: the `outbox console` program on a free
//! port, an HTTP client that keeps its cookie, and rows to look at.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use sqlx::PgPool;
use uuid::Uuid;

/// A running `outbox console`; killed when dropped.
pub struct Console {
    child: Child,
    /// `http://127.0.0.1:PORT`.
    pub base: String,
    log: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

impl Drop for Console {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Console {
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// What it has logged so far (stderr), one line each.
    pub fn log(&self) -> Vec<String> {
        self.log.lock().unwrap().clone()
    }
}

/// `outbox console` on the database at `url`, a free loopback port, with
/// `args` and `env`; returns once it serves.
pub fn start(url: &str, args: &[&str], env: &[(&str, &str)]) -> Console {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_outbox"));
    cmd.env_remove("DATABASE_URL")
        .env_remove("RUST_LOG")
        .env_remove("OUTBOX_CONSOLE_PASSWORD")
        .env("DATABASE_URL", url)
        .envs(env.iter().copied())
        .args(["console", "--listen", "127.0.0.1:0"])
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("start outbox console");
    let stderr = child.stderr.take().unwrap();
    let mut lines = BufReader::new(stderr).lines();
    let base = loop {
        let line = lines
            .next()
            .expect("outbox console exited before serving")
            .unwrap();
        if let Some(rest) = line.strip_prefix("console: serving ") {
            break rest.trim_end_matches('/').to_owned();
        }
    };
    // Keep reading its log so it never blocks on a full pipe.
    let log = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let kept = log.clone();
    std::thread::spawn(move || {
        for line in lines.map_while(Result::ok) {
            kept.lock().unwrap().push(line);
        }
    });
    Console { child, base, log }
}

/// A client that keeps cookies and does not follow redirects.
pub fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .cookie_store(true)
        .redirect(reqwest::redirect::Policy::none())
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap()
}

/// GET `path`: (status, body).
pub async fn get(c: &reqwest::Client, console: &Console, path: &str) -> (u16, String) {
    let r = c.get(console.url(path)).send().await.unwrap();
    (r.status().as_u16(), r.text().await.unwrap())
}

/// POST the form `pairs` to `path`: (status, Location header, body).
pub async fn post(
    c: &reqwest::Client,
    console: &Console,
    path: &str,
    pairs: &[(&str, &str)],
) -> (u16, Option<String>, String) {
    let r = c.post(console.url(path)).form(pairs).send().await.unwrap();
    let status = r.status().as_u16();
    let location = r
        .headers()
        .get("location")
        .map(|v| v.to_str().unwrap().to_owned());
    (status, location, r.text().await.unwrap())
}

/// The session's CSRF token, as a page carries it.
pub fn csrf(page: &str) -> String {
    let mark = r#"name="csrf-token" content=""#;
    let start = page.find(mark).expect("a page with a CSRF token") + mark.len();
    page[start..start + 64].to_owned()
}

/// The selection a confirmation page carries to its action, if it has one.
pub fn selection(page: &str) -> Option<String> {
    let mark = r#"type="hidden" name="selection" value=""#;
    let start = page.find(mark)? + mark.len();
    Some(page[start..start + page[start..].find('"')?].to_owned())
}

/// POST `pairs` to `/dead-letters/confirm`, then to `/dead-letters/apply`
/// with the selection the confirmation carries, as the confirmation's
/// button does: the latter's (status, Location header, body).
pub async fn confirm_and_apply(
    c: &reqwest::Client,
    console: &Console,
    pairs: &[(&str, &str)],
) -> (u16, Option<String>, String) {
    let (status, _, page) = post(c, console, "/dead-letters/confirm", pairs).await;
    assert_eq!(status, 200, "{page}");
    let selection = selection(&page).expect("a confirmation with a selection");
    let mut pairs = pairs.to_vec();
    pairs.push(("selection", &selection));
    post(c, console, "/dead-letters/apply", &pairs).await
}

/// The ids of the dead-letter checkboxes on a page, in order.
pub fn ticked_ids(page: &str) -> Vec<Uuid> {
    page.match_indices(r#"type="checkbox" name="id" value=""#)
        .map(|(i, m)| page[i + m.len()..i + m.len() + 36].parse().unwrap())
        .collect()
}

/// Inserts event `n` (payload `{"n": n}`) of aggregate `agg`, type `order`;
/// dead-lettered an hour ago with an error when `dead`.
pub async fn insert(pool: &PgPool, agg: &str, n: i64, dead: bool) -> Uuid {
    sqlx::query_scalar(
        "INSERT INTO outbox_events
             (aggregate_type, aggregate_id, event_type, payload, attempts, last_error,
              dead_lettered_at)
         VALUES ('order', $1, 'order.updated', jsonb_build_object('n', $2::bigint),
                 CASE WHEN $3 THEN 10 ELSE 0 END,
                 CASE WHEN $3 THEN 'broker said no' END,
                 CASE WHEN $3 THEN now() - interval '1 hour' END)
         RETURNING id",
    )
    .bind(agg)
    .bind(n)
    .bind(dead)
    .fetch_one(pool)
    .await
    .unwrap()
}

/// `SELECT count(*) …`.
pub async fn count(pool: &PgPool, sql: &str) -> i64 {
    sqlx::query_scalar(sql).fetch_one(pool).await.unwrap()
}
