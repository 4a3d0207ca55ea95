//! Connecting to a benchmark's server. Its URL is a throwaway cluster's or
//! one the program running the benchmark has checked already, so it is
//! parsed here, not judged again; passwords never show.

use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use outbox::redact::redact_url;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{ConnectOptions, Connection, PgPool};

/// The one redaction, re-exported for the modules that print messages.
pub use outbox::redact::redact_text;

/// How long opening a connection may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// The connection options `url` gives.
pub fn check_url(url: &str) -> Result<PgConnectOptions> {
    url.parse().map_err(|e: sqlx::Error| {
        anyhow!(
            "invalid database URL {}: {}",
            redact_url(url),
            redact_text(&e.to_string())
        )
    })
}

/// A pool of `max` connections that fails within a few seconds when the
/// server cannot be reached, warning about statements slower than `slow`
/// (bulk loads are slow on purpose).
pub async fn connect_flagging_slow(url: &str, max: u32, slow: Duration) -> Result<PgPool> {
    let options = check_url(url)?
        .log_statements(log::LevelFilter::Debug)
        .log_slow_statements(log::LevelFilter::Warn, slow);
    let shown = redact_url(url);
    // One connection first: a pool only says it timed out, after waiting
    // the whole acquire timeout; a single connection fails at once with
    // the server's (or the network's) own reason.
    match tokio::time::timeout(CONNECT_TIMEOUT, options.connect()).await {
        Ok(Ok(conn)) => {
            let _ = conn.close().await;
        }
        Ok(Err(e)) => bail!("cannot connect to {shown}: {}", redact_text(&e.to_string())),
        Err(_) => bail!(
            "cannot connect to {shown}: no answer within {} s",
            CONNECT_TIMEOUT.as_secs()
        ),
    }
    PgPoolOptions::new()
        .max_connections(max)
        .acquire_timeout(CONNECT_TIMEOUT)
        .connect_with(options)
        .await
        .with_context(|| format!("cannot connect to {shown}"))
}
