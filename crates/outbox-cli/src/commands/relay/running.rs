//! The two assemblies of a relay, behind one face for the daemon: a relay
//! of one source (`database_url` and `schema`, [`super::one`]) and a relay
//! of many (`[[source]]` entries, [`super::sources`]). Each is planned,
//! connected and started in the same steps, and runs as a [`Running`]
//! that the daemon watches, drains, cleans and stops alike.

use std::time::Duration;

use anyhow::Result;
use outbox::{Cleaner, CleanerConfig, CleanerHandle, StatsSnapshot};

use super::one::{self, One};
use super::sources::{self, Many, SourcesPlan};
use super::wiring::{Around, DrainCheck, Started};
use crate::ctx::Ctx;
use crate::daemon::metrics::Metrics;

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

impl Prepared {
    pub(super) async fn spawn(self, ctx: &Ctx, around: Around<'_>) -> Result<Started<Running>> {
        Ok(match self {
            Prepared::One(p) => p.spawn(ctx, around).await?.map(Running::One),
            Prepared::Many(p) => p.spawn(ctx, around).await?.map(Running::Many),
        })
    }
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
