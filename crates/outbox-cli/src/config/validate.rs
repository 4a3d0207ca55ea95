//! Range and shape checks on the effective configuration. Each error names
//! the key, its value, where the value came from and what is allowed.

use anyhow::{anyhow, bail, Result};

use super::logging;
use super::Loaded;
use crate::text::{cut, cut_words};

/// The library's refusal `e` of a setting of table `table` (`relay`,
/// `cleaner`), naming the key and where its value came from (`at`).
fn in_table(table: &str, e: outbox::Error, at: &dyn Fn(&str) -> String) -> anyhow::Error {
    match e {
        outbox::Error::Invalid { field, reason } => {
            let key = format!("{table}.{field}");
            anyhow!("invalid {key} ({}): {reason}", at(&key))
        }
        other => anyhow!(other),
    }
}

/// Checks every setting of `l`.
pub fn validate(l: &Loaded) -> Result<()> {
    let c = &l.config;
    let at = |key: &str| l.origin(key).describe();

    if let Some(id) = &c.relay.instance_id {
        let at = at("relay.instance_id");
        if id.trim().is_empty() {
            bail!(
                "invalid relay.instance_id ({at}): the value is empty: give each instance a stable, distinct name (the pod name), or leave it out for HOST-PID-RANDOM"
            );
        }
        // The library's own limit (bytes), checked here to cut the value.
        if id.len() > 200 {
            bail!(
                "invalid relay.instance_id = {} ({at}): use 1 to 200 characters",
                cut(id)
            );
        }
    }
    printable(l, "relay.instance_id", c.relay.instance_id.as_deref())?;
    printable(l, "tracing.service_name", c.tracing.service_name.as_deref())?;
    c.relay.validate().map_err(|e| in_table("relay", e, &at))?;
    c.cleaner
        .validate()
        .map_err(|e| in_table("cleaner", e, &at))?;
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
        // The check `outbox relay` binds with, so that `config check` passes
        // no address the relay cannot listen on.
        crate::daemon::listen::listen_addrs(addr).map_err(|why| {
            anyhow!(
                "invalid http.addr = {} ({}): {why}",
                cut(addr),
                at("http.addr")
            )
        })?;
    }
    if let Some(level) = &c.log.level {
        logging::check_level(level).map_err(|fix| {
            anyhow!(
                "invalid log.level = {} ({}): {}",
                cut(level),
                at("log.level"),
                cut_words(&fix)
            )
        })?;
    }
    if let Some(endpoint) = &c.tracing.otlp_endpoint {
        if !(endpoint.starts_with("http://") || endpoint.starts_with("https://")) {
            bail!(
                "invalid tracing.otlp_endpoint = {} ({}): use the collector's base URL, e.g. http://127.0.0.1:4318 (spans go to /v1/traces under it)",
                cut(endpoint),
                at("tracing.otlp_endpoint")
            );
        }
    }
    if let Some(url) = &c.database_url {
        database_url(url, &at("database_url"))?;
    }
    publisher(l, &c.publisher, "publisher")?;
    sources(l)
}

/// `[sources]` and the `[[source]]` entries: the checks of
/// [`super::Config::sources`], with where each refused value was set, and
/// each entry's publisher checked like `[publisher]`.
fn sources(l: &Loaded) -> Result<()> {
    let c = &l.config;
    for (key, min, max) in super::sources::SETTINGS_RANGES {
        range(l, key, c.sources_settings.ranged(key), min, max)?;
    }
    if c.source.is_empty() {
        return Ok(());
    }
    match l.origin("schema") {
        super::Origin::Default | super::Origin::Flag(_) => {}
        set => bail!(
            "schema = {} ({}) is set together with [[source]] entries ({}), whose own schema or schemas settings say what is served: move the schema into a [[source]] entry, or remove the [[source]] entries",
            cut(&c.schema),
            set.describe(),
            l.origin("source[1]").describe()
        ),
    }
    c.sources().map_err(|r| {
        // Where the key was written (`source[2].batch_size`), else its
        // entry (a missing key).
        let origin = match l.origin(&r.key) {
            super::Origin::Default => l.origin(r.key.rsplit_once('.').map_or(&*r.key, |(e, _)| e)),
            set => set,
        };
        anyhow!("invalid {} ({}): {}", r.key, origin.describe(), r.reason)
    })?;
    for (i, s) in c.source.iter().enumerate() {
        if let Some(p) = &s.publisher {
            publisher(l, p, &format!("source[{}].publisher", i + 1))?;
        }
    }
    Ok(())
}

/// Refuses a control character (a line break, an escape, …) in the id or
/// name `key`: such values are written into log lines, where one could
/// forge a line or colour a terminal.
fn printable(l: &Loaded, key: &str, value: Option<&str>) -> Result<()> {
    let Some(value) = value else {
        return Ok(());
    };
    if let Some(c) = crate::text::control_char(value) {
        bail!(
            "invalid {key} = {} ({}): it holds the control character {:?}, which would reach log lines and could forge or colour them: use printable characters only, e.g. the pod name",
            cut(value),
            l.origin(key).describe(),
            c
        );
    }
    Ok(())
}

/// The database URL, checked by the same function that connects with it
/// (`postgres://` or `postgresql://` only), with where it was set.
fn database_url(url: &str, at: &str) -> Result<()> {
    crate::db::check_url(url)
        .map(|_| ())
        .map_err(|e| anyhow!("{} ({at})", cut_words(&format!("{e:#}"))))
}

/// `a, b or c`.
fn one_of(names: &[&str]) -> String {
    match names.split_last() {
        Some((last, rest)) if !rest.is_empty() => format!("{} or {last}", rest.join(", ")),
        _ => names.join(""),
    }
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

/// The publisher spec and its broker table, checked by the same function
/// that builds the relay's publisher; the message format and the
/// CloudEvents source.
fn publisher(l: &Loaded, p: &super::publisher::PublisherConfig, at: &str) -> Result<()> {
    // A `[[source]]` entry's `publisher = "…"` string has no `.spec` line
    // of its own: the entry's `publisher` line stands for its keys.
    let origin = |key: &str| match l.origin(&format!("{at}.{key}")) {
        super::Origin::Default => l.origin(at),
        set => set,
    };
    if p.format.parse::<outbox_publishers::Format>().is_err() {
        bail!(
            "invalid {at}.format = {} ({}): use {}",
            cut(&p.format),
            origin("format").describe(),
            one_of(&outbox_publishers::Format::NAMES)
        );
    }
    let source = &p.cloudevents_source;
    if source.trim().is_empty() || source.chars().any(|c| c.is_whitespace() || c.is_control()) {
        bail!(
            "invalid {at}.cloudevents_source = {} ({}): use a non-empty URI reference without spaces, e.g. /outbox/{{schema}} or https://shop.example.com/orders",
            cut(source),
            origin("cloudevents_source").describe()
        );
    }
    // Name the setting the way the user wrote it.
    let name = match origin("spec") {
        super::Origin::Flag(flag) => flag.to_owned(),
        super::Origin::Env(var) => var,
        super::Origin::File { path, line } => format!("{at} ({}:{line})", path.display()),
        super::Origin::Default => at.to_owned(),
    };
    // A broker library's message may quote a whole value: cut long words.
    let checked = outbox_publishers::registry::check(&name, &p.spec, &p.tables)
        .map_err(|e| anyhow!(cut_words(&format!("{e:#}"))))?;
    for table in p.tables.keys() {
        if table != checked.kind.name {
            let form = outbox_publishers::registry::PUBLISHERS
                .iter()
                .find(|k| k.name == table)
                .map_or(table.as_str(), |k| k.form);
            bail!(
                "[{at}.{table}] is set ({}) but the publisher is {} ({}): use a {form} publisher or remove the table",
                origin(table).describe(),
                outbox_publishers::registry::shown(&p.spec),
                origin("spec").describe()
            );
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_postgres_urls_are_database_urls() {
        for url in ["http://h/d", "mysql://u:pw@h/d", "h/d", "://h", ""] {
            let e = database_url(url, "set by --database-url")
                .unwrap_err()
                .to_string();
            assert!(
                e.contains("postgres://") && e.contains("--database-url"),
                "{e}"
            );
            assert!(!e.contains(":pw@"), "{e}");
        }
        for url in [
            "postgres://u@h/d",
            "postgresql://u:pw@h:5432/d?sslmode=disable",
        ] {
            database_url(url, "").unwrap();
        }
    }
}
