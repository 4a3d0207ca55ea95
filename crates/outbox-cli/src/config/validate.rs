//! Range and shape checks on the effective configuration. Each error names
//! the key, its value, where the value came from and what is allowed.

use anyhow::{anyhow, bail, Result};
use sqlx::postgres::PgConnectOptions;

use super::logging;
use super::Loaded;
use crate::db::redact_text;

/// What `publisher` may be.
pub const PUBLISHER_FORMS: &str =
    "use stdout, file:PATH, kafka://HOST:PORT[,HOST:PORT…] or amqp://USER:PASS@HOST:PORT/VHOST";

/// Checks every setting of `l`.
pub fn validate(l: &Loaded) -> Result<()> {
    let c = &l.config;
    let at = |key: &str| l.origin(key).describe();

    if let Err(e) = c.relay.validate() {
        return Err(match e {
            outbox::Error::Invalid { field, reason } => {
                let key = format!("relay.{field}");
                anyhow!("invalid {key} ({}): {reason}", at(&key))
            }
            other => anyhow!(other),
        });
    }
    if let Err(e) = c.cleaner.validate() {
        return Err(match e {
            outbox::Error::Invalid { field, reason } => {
                let key = format!("cleaner.{field}");
                anyhow!("invalid {key} ({}): {reason}", at(&key))
            }
            other => anyhow!(other),
        });
    }
    if let Err(e) = outbox::Schema::new(&c.schema) {
        let reason = match e {
            outbox::Error::Invalid { reason, .. } => reason,
            other => other.to_string(),
        };
        bail!("invalid schema ({}): {reason}", at("schema"));
    }
    range(
        l,
        "shutdown_timeout_secs",
        c.shutdown_timeout_secs,
        1,
        3_600,
    )?;
    range(l, "http.refresh_ms", c.http.refresh_ms, 100, 3_600_000)?;
    range(
        l,
        "http.check_timeout_ms",
        c.http.check_timeout_ms,
        10,
        60_000,
    )?;
    if let Some(addr) = &c.http.addr {
        let ok = addr
            .rsplit_once(':')
            .is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok());
        if !ok {
            bail!(
                "invalid http.addr = {addr:?} ({}): use HOST:PORT, e.g. 127.0.0.1:9090 or 0.0.0.0:9090",
                at("http.addr")
            );
        }
    }
    if let Some(level) = &c.log.level {
        logging::check_level(level)
            .map_err(|fix| anyhow!("invalid log.level = {level:?} ({}): {fix}", at("log.level")))?;
    }
    if let Some(url) = &c.database_url {
        if let Err(e) = url.parse::<PgConnectOptions>() {
            bail!(
                "invalid database URL {} ({}): {} (expected postgres://USER:PASS@HOST:PORT/DB)",
                redact_text(url),
                at("database_url"),
                redact_text(&e.to_string())
            );
        }
    }
    publisher(l)
}

fn range(l: &Loaded, key: &str, value: u64, min: u64, max: u64) -> Result<()> {
    if value < min || value > max {
        bail!(
            "invalid {key} = {value} ({}): out of range: use {min} to {max}",
            l.origin(key).describe()
        );
    }
    Ok(())
}

fn publisher(l: &Loaded) -> Result<()> {
    let p = &l.config.publisher;
    let spec = p.spec.as_str();
    // Name the setting the way the user wrote it.
    let name = match l.origin("publisher.spec") {
        super::Origin::Flag(flag) => flag.to_owned(),
        super::Origin::Env(var) => var,
        super::Origin::File { path, line } => format!("publisher ({}:{line})", path.display()),
        super::Origin::Default => "publisher".to_owned(),
    };
    let shown = redact_text(spec);
    let known = spec == "stdout"
        || spec.starts_with("file:")
        || ["kafka", "amqp", "amqps"].contains(&p.scheme().unwrap_or(""));
    if !known {
        bail!("unknown {name} {shown:?}: {PUBLISHER_FORMS}");
    }
    if spec == "file:" {
        bail!(
            "invalid {name} {shown:?}: file: needs a path, e.g. file:/var/lib/outbox/events.jsonl"
        );
    }
    let scheme = p.scheme().unwrap_or(spec);
    for (table, wants) in [("kafka", &p.kafka), ("amqp", &p.amqp)] {
        let fits = scheme == table || (table == "amqp" && scheme == "amqps");
        if wants.is_some() && !fits {
            bail!(
                "[publisher.{table}] is set ({}) but the publisher is {shown:?} ({}): use a {table}:// publisher or remove the table",
                l.origin(&format!("publisher.{table}")).describe(),
                l.origin("publisher.spec").describe()
            );
        }
    }
    Ok(())
}
