//! From `log.level` (or `RUST_LOG`) to a tracing filter.

use anyhow::{anyhow, Result};
use tracing_subscriber::EnvFilter;

use super::{Loaded, Origin};

const LEVELS: &[&str] = &["off", "error", "warn", "info", "debug", "trace"];

/// Checks a `log.level` value; the error says what is allowed.
pub fn check_level(level: &str) -> Result<(), String> {
    let l = level.trim().to_ascii_lowercase();
    if LEVELS.contains(&l.as_str()) {
        return Ok(());
    }
    if l.contains(['=', ',']) {
        return EnvFilter::try_new(&l)
            .map(|_| ())
            .map_err(|e| format!("not a valid filter: {e}"));
    }
    Err("use off, error, warn, info, debug or trace, or a RUST_LOG-style filter such as warn,outbox=debug".to_owned())
}

/// A bare level applies to the outbox's own modules; libraries (sqlx,
/// hyper, …) stay at `warn` unless a full filter is given.
fn directive(level: &str) -> String {
    let l = level.trim().to_ascii_lowercase();
    match l.as_str() {
        "off" | "error" | "warn" => l,
        "info" | "debug" | "trace" => format!("warn,outbox={l},outbox_publishers={l}"),
        _ => level.trim().to_owned(),
    }
}

/// The filter: `--log-level` wins, then `RUST_LOG`, then `log.level` from
/// `OUTBOX_LOG_LEVEL`, the file or the default. Whatever it says, the
/// driver's URL parser logs errors only: its warning about an unknown URL
/// parameter quotes the value, which may be a password (`sslpassword=…`);
/// [`crate::db`] warns about those parameters by name instead.
pub fn log_filter(l: &Loaded) -> Result<EnvFilter> {
    Ok(chosen_filter(l)?.add_directive(QUIET_URL_PARSER.parse()?))
}

/// The tracing target of the driver's URL parser, kept to errors.
const QUIET_URL_PARSER: &str = "sqlx_postgres::options::parse=error";

fn chosen_filter(l: &Loaded) -> Result<EnvFilter> {
    let from_flag = matches!(l.origin("log.level"), Origin::Flag(_));
    if !from_flag {
        if let Some(rust_log) = std::env::var("RUST_LOG")
            .ok()
            .filter(|v| !v.trim().is_empty())
        {
            return EnvFilter::try_new(&rust_log)
                .map_err(|e| anyhow!("invalid RUST_LOG={rust_log:?}: {e}"));
        }
    }
    let level = l.config.log.level.as_deref().unwrap_or("warn");
    EnvFilter::try_new(directive(level)).map_err(|e| {
        anyhow!(
            "invalid log.level = {level:?} ({}): {e}",
            l.origin("log.level").describe()
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_and_filters() {
        assert!(check_level("DEBUG").is_ok());
        assert!(check_level("warn,outbox=trace").is_ok());
        assert!(check_level("loud").unwrap_err().contains("debug"));
        assert_eq!(directive("warn"), "warn");
        assert_eq!(
            directive("debug"),
            "warn,outbox=debug,outbox_publishers=debug"
        );
        assert_eq!(directive("info,sqlx=debug"), "info,sqlx=debug");
    }
}
