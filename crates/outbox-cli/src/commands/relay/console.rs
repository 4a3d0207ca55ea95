//! `outbox relay --console`: the web console on the relay's HTTP server,
//! over the relay's one source or, with `[[source]]` entries, over the one
//! source `--console-source` names (optional when one entry names one
//! schema). The console shows one schema's tables; a relay of many sources
//! serves it for one of them, refused at start when the choice is missing,
//! unknown or names many schemas.

use std::sync::Arc;

use anyhow::{bail, Context, Result};
use outbox::Schema;

use super::running::Plan;
use super::RelayArgs;
use crate::commands::targets::{names, Pools};
use crate::config::{SchemaSelector, SourceEntry};
use crate::ctx::Ctx;
use crate::daemon::http::Mounted;
use crate::db;
use crate::text::cut;

/// The console to serve: over which database and schema, with which
/// password.
pub(super) struct Choice {
    password: Option<String>,
    url: String,
    schema: Schema,
    /// The source's name, with `[[source]]` entries.
    source: Option<String>,
}

/// The console `--console` asks for, if it does: refused (before anything
/// starts) without an HTTP server, without a password off loopback, or
/// without one source to show.
pub(super) async fn choose(ctx: &Ctx, args: &RelayArgs, plan: &Plan) -> Result<Option<Choice>> {
    if !args.console {
        return Ok(None);
    }
    let Some(addr) = &ctx.loaded.config.http.addr else {
        bail!("--console serves on the --http-addr server: set --http-addr too");
    };
    let password =
        crate::commands::console::relay_password(args.console_password_file.as_deref(), addr)?;
    let chosen = args.console_source.as_deref();
    let choice = match plan {
        Plan::One { url } => {
            if let Some(name) = chosen {
                bail!(
                    "--console-source {} picks one of the [[source]] entries, and the configuration has none: leave it out (the console serves schema {}) or add the entries",
                    cut(name),
                    ctx.schema.name()
                );
            }
            Choice {
                password,
                url: url.clone(),
                schema: ctx.schema.clone(),
                source: None,
            }
        }
        Plan::Many(_) => {
            let entries = ctx.loaded.config.sources().map_err(anyhow::Error::new)?;
            let (url, schema, name) = source(ctx, &entries, chosen).await?;
            Choice {
                password,
                url,
                schema,
                source: Some(name),
            }
        }
    };
    Ok(Some(choice))
}

/// The database, schema and name of the source `chosen` names: an entry
/// naming one schema, or `ENTRY/SCHEMA` for a schema an entry's pattern
/// finds now; unnamed, the only entry when it names one schema.
async fn source(
    ctx: &Ctx,
    entries: &[SourceEntry],
    chosen: Option<&str>,
) -> Result<(String, Schema, String)> {
    let only = match entries {
        [e] if matches!(e.schemas, SchemaSelector::One(_)) => Some(e.name.as_str()),
        _ => None,
    };
    let Some(name) = chosen.or(only) else {
        bail!(
            "--console serves one source's tables: pass --console-source NAME, one of {}",
            names(entries)
        );
    };
    let (entry_name, schema) = match name.split_once('/') {
        Some((entry, schema)) => (entry, Some(schema)),
        None => (name, None),
    };
    let Some(entry) = entries.iter().find(|e| e.name == entry_name) else {
        bail!(
            "--console-source: unknown source {}: the sources are {}",
            cut(name),
            names(entries)
        );
    };
    match (&entry.schemas, schema) {
        (SchemaSelector::One(one), None) => {
            Ok((entry.database_url.clone(), one.clone(), entry.name.clone()))
        }
        (SchemaSelector::One(_), Some(_)) => bail!(
            "--console-source: source {} serves one schema: use --console-source {}",
            cut(name),
            entry.name
        ),
        (SchemaSelector::Pattern(pattern), None) => bail!(
            "--console-source: source {} serves every schema matching {} and the console shows one: use --console-source {}/SCHEMA",
            entry.name,
            cut(pattern),
            entry.name
        ),
        // The schema must match the pattern and hold the outbox tables now,
        // as for `--source` of `outbox status`.
        (SchemaSelector::Pattern(_), Some(_)) => {
            let mut found = ctx
                .targets(Some(name), &mut Pools::default())
                .await
                .context("--console-source")?;
            match found.pop() {
                Some(Ok(t)) if found.is_empty() => Ok((t.url, t.schema, name.to_owned())),
                _ => bail!("--console-source: {} names no one source", cut(name)),
            }
        }
    }
}

impl Choice {
    /// The console, reading on connections of its own (never the
    /// relay's), and what it shows: the schema, or the source's name.
    pub(super) async fn mount(self) -> Result<(Arc<dyn Mounted>, String)> {
        let pool = db::connect(&self.url, 2).await?;
        let app = crate::commands::console::app(pool, &self.schema, self.password, false, None);
        let shown = self.source.unwrap_or_else(|| self.schema.name().to_owned());
        Ok((app, shown))
    }
}
