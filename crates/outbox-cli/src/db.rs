//! Connecting to PostgreSQL with one-line errors and redacted passwords.

use std::time::Duration;

use anyhow::{anyhow, Context, Result};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{ConnectOptions, PgPool};

/// Replaces the password of every `scheme://user:password@` in `text` with
/// `***`.
pub fn redact_text(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find("://") {
        let (head, tail) = rest.split_at(i + 3);
        out.push_str(head);
        let end = tail
            .find(|c: char| c.is_whitespace() || c == '"' || c == '\'')
            .unwrap_or(tail.len());
        let authority = &tail[..end];
        match (authority.find(':'), authority.rfind('@')) {
            (Some(colon), Some(at)) if colon < at && !authority[..colon].contains('/') => {
                out.push_str(&authority[..colon]);
                out.push_str(":***");
                out.push_str(&authority[at..]);
            }
            _ => out.push_str(authority),
        }
        rest = &tail[end..];
    }
    out.push_str(rest);
    out
}

/// The database URL from `--database-url` / `DATABASE_URL`, or a clear error.
pub fn require_url(url: &Option<String>) -> Result<String> {
    url.clone().ok_or_else(|| {
        anyhow!("no database given: pass --database-url postgres://USER:PASS@HOST:PORT/DB or set DATABASE_URL")
    })
}

/// Connects a pool of `max` connections, failing within a few seconds.
pub async fn connect(url: &str, max: u32) -> Result<PgPool> {
    connect_flagging_slow(url, max, Duration::from_secs(10)).await
}

/// [`connect`], warning about statements slower than `slow` (bulk loads
/// in benchmarks are slow on purpose).
pub async fn connect_flagging_slow(url: &str, max: u32, slow: Duration) -> Result<PgPool> {
    let options: PgConnectOptions = url.parse().map_err(|e| {
        anyhow!(
            "invalid database URL {}: {e} (expected postgres://USER:PASS@HOST:PORT/DB)",
            redact_text(url)
        )
    })?;
    // Batch statements (claims of thousands of rows, bulk loads) are
    // legitimately slow now and then; only flag the pathological ones.
    let options = options
        .log_statements(log::LevelFilter::Debug)
        .log_slow_statements(log::LevelFilter::Warn, slow);
    PgPoolOptions::new()
        .max_connections(max)
        .acquire_timeout(Duration::from_secs(5))
        .connect_with(options)
        .await
        .with_context(|| format!("cannot connect to {}", redact_text(url)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_are_redacted() {
        assert_eq!(
            redact_text("cannot connect to postgres://app:s3cr3t@db:5432/x: refused"),
            "cannot connect to postgres://app:***@db:5432/x: refused"
        );
        assert_eq!(redact_text("postgres://app@db/x"), "postgres://app@db/x");
        assert_eq!(
            redact_text("a amqp://u:p@h/v and kafka://h:9092"),
            "a amqp://u:***@h/v and kafka://h:9092"
        );
    }
}
