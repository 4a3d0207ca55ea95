//! The two assemblies of a relay, behind one face for the daemon: a relay
//! of one source (`database_url` and `schema`, [`super::one`]) and a relay
//! of many (`[[source]]` entries, [`super::sources`]). Each is planned,
//! connected and started in the same steps, and runs as a [`Running`]
//! that the daemon watches, drains, cleans and stops alike.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;
use outbox::{Cleaner, CleanerConfig, CleanerHandle, StatsSnapshot};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::one::{self, One};
use super::sources::{self, Many, SourcesPlan};
use crate::ctx::Ctx;
use crate::daemon::http::{Ready, RelayState};
use crate::daemon::metrics::{Metrics, RelayInfo};
use crate::daemon::telemetry::Export;

/// What the configuration asks to serve.
pub(super) enum Plan {
    /// No `[[source]]` entry: `database_url` and `schema`.
    One { url: String },
    /// `[[source]]` entries.
    Many(SourcesPlan),
}

impl Plan {
    pub(super) fn from_config(ctx: &Ctx) -> Result<Plan> {
        let c = &ctx.loaded.config;
        if c.source.is_empty() {
            let url = crate::db::require_url(&c.database_url)?;
            Ok(Plan::One { url })
        } else {
            Ok(Plan::Many(SourcesPlan::from_config(c)?))
        }
    }

    /// Opens the databases and the publishers (`http`: for an HTTP server's
    /// probes too).
    pub(super) async fn connect(
        self,
        ctx: &Ctx,
        metrics: &Metrics,
        http: bool,
    ) -> Result<Prepared> {
        Ok(match self {
            Plan::One { url } => Prepared::One(one::connect(ctx, url, metrics, http).await?),
            Plan::Many(plan) => Prepared::Many(sources::connect(plan).await?),
        })
    }
}

/// Connected, not yet started.
pub(super) enum Prepared {
    One(one::Prepared),
    Many(sources::Prepared),
}

/// What the daemon set up for the relay, which the assembly wires in.
pub(super) struct Around<'a> {
    /// Every source's metrics.
    pub metrics: &'a Arc<Metrics>,
    /// Running or stopping, for `/readyz`.
    pub state: &'a Arc<RelayState>,
    /// The OTLP exporter, when `[tracing]` sets one.
    #[cfg_attr(not(feature = "opentelemetry"), allow(dead_code))]
    pub export: Option<&'a Export>,
    /// Turns true when the relay stops: for the tasks beside it.
    pub stopped: watch::Receiver<bool>,
}

impl Prepared {
    pub(super) async fn spawn(self, ctx: &Ctx, around: Around<'_>) -> Result<Started> {
        match self {
            Prepared::One(p) => p.spawn(ctx, around).await,
            Prepared::Many(p) => p.spawn(ctx, around).await,
        }
    }
}

/// A relay started.
pub(super) struct Started {
    pub running: Running,
    /// `/readyz`'s checks (for a relay of one source, only with an HTTP
    /// server).
    pub readiness: Option<Ready>,
    /// Tasks beside the relay, aborted once it stopped.
    pub background: Vec<JoinHandle<()>>,
    /// `outbox_relay_info`'s labels.
    pub info: RelayInfo,
}

/// A running relay, of one source or many.
pub(super) enum Running {
    One(One),
    Many(Many),
}

impl Running {
    pub(super) fn instance_id(&self) -> &str {
        match self {
            Running::One(r) => r.relay.instance_id(),
            Running::Many(r) => r.relay.instance_id(),
        }
    }

    /// Totals so far.
    pub(super) fn stats(&self) -> StatsSnapshot {
        match self {
            Running::One(r) => r.relay.stats(),
            Running::Many(r) => r.relay.stats(),
        }
    }

    /// Whether it stopped by itself (a fatal error, logged where it
    /// happened).
    pub(super) fn is_finished(&self) -> bool {
        match self {
            Running::One(r) => r.relay.is_finished(),
            Running::Many(r) => r.relay.is_finished(),
        }
    }

    /// Graceful stop; past `deadline` what is left is aborted.
    pub(super) async fn shutdown_within(self, deadline: Duration) -> outbox::Result<StatsSnapshot> {
        match self {
            Running::One(r) => r.relay.shutdown_within(deadline).await,
            Running::Many(r) => r.relay.shutdown_within(deadline).await,
        }
    }

    /// The "running" line, with what tells this relay apart.
    pub(super) fn log_running(&self, drain: bool) {
        match self {
            Running::One(r) => r.log_running(drain),
            Running::Many(r) => r.log_running(drain),
        }
    }

    /// How often `--drain` counts what is pending.
    pub(super) fn drain_tick(&self) -> Duration {
        match self {
            Running::One(r) => r.drain_tick(),
            Running::Many(r) => r.drain_tick(),
        }
    }

    /// Events left to deliver, for `--drain`.
    pub(super) async fn pending(&mut self) -> Result<i64, DrainCheck> {
        match self {
            Running::One(r) => r.pending().await,
            Running::Many(r) => r.pending().await,
        }
    }

    /// Retention mode keeps processed rows: the cleaner removes expired
    /// ones from every schema served whose source keeps them; `None` when
    /// none does.
    pub(super) fn cleaner(&self, config: &CleanerConfig) -> Result<Option<CleanerHandle>> {
        let cleaner = match self {
            Running::One(r) => match r.kept() {
                Some((pool, schema)) => Some(Cleaner::spawn(pool, schema, config.clone())?),
                None => None,
            },
            Running::Many(r) => match r.cleaned() {
                Some(targets) => Some(Cleaner::spawn_over(config.clone(), targets)?),
                None => None,
            },
        };
        Ok(cleaner)
    }
}

/// Why the events pending could not be counted.
pub(super) enum DrainCheck {
    /// A schema has no outbox tables: the drain would never end.
    Unmigrated(anyhow::Error),
    /// Anything else (a database restarting): counted again at the next tick.
    Failed(anyhow::Error),
    /// Not every source is known yet (a pattern not matched once, a
    /// database not answering): nothing pending among those known says
    /// nothing, so counted again at the next tick.
    NotYet,
}

impl DrainCheck {
    /// Schema `schema` (of source `source`, for a relay of many) has no
    /// outbox tables.
    pub(super) fn unmigrated(source: Option<&str>, schema: &str) -> Self {
        let fix = format!("run `outbox migrate --schema {schema}` on its database");
        DrainCheck::Unmigrated(match source {
            Some(source) => anyhow::anyhow!(
                "source {source}: schema {schema} has no outbox tables, so --drain cannot finish: {fix}, or remove the entry"
            ),
            None => anyhow::anyhow!(
                "schema {schema} has no outbox tables, so --drain cannot finish: {fix}"
            ),
        })
    }
}

impl From<outbox::Error> for DrainCheck {
    fn from(e: outbox::Error) -> Self {
        DrainCheck::Failed(e.into())
    }
}

impl From<sqlx::Error> for DrainCheck {
    fn from(e: sqlx::Error) -> Self {
        DrainCheck::Failed(e.into())
    }
}
