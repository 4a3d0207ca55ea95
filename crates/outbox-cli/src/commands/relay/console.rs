//! `outbox relay --console`: the web console on the relay's HTTP server,
//! over the relay's one source. It shows one schema's tables: a relay of
//! many sources does not serve it.

use std::sync::Arc;

use anyhow::{bail, Result};
use outbox::Schema;

use super::running::Plan;
use super::RelayArgs;
use crate::ctx::Ctx;
use crate::db;
use crate::http::Mounted;

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
    let password = crate::console::relay_password(args.console_password_file.as_deref(), addr)?;
    let Plan::One { url } = plan else {
        bail!("--console serves one source's tables: with [[source]] entries, run `outbox console --database-url URL --schema SCHEMA` for the source to look at, beside the relay");
    };
    Ok(Some(Choice {
        password,
        url: url.clone(),
        schema: ctx.schema.clone(),
        source: None,
    }))
}

impl Choice {
    /// The console, reading on connections of its own (never the
    /// relay's), and what it shows: the schema, or the source's name.
    pub(super) async fn mount(self) -> Result<(Arc<dyn Mounted>, String)> {
        let pool = db::connect(&self.url, 2).await?;
        let app = crate::console::app(pool, &self.schema, self.password, false, None);
        let shown = self.source.unwrap_or_else(|| self.schema.name().to_owned());
        Ok((app, shown))
    }
}
