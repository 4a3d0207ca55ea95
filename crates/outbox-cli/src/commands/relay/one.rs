//! The relay of one source: `database_url` and `schema`, served by an
//! [`outbox::Relay`]. What only it has: its readiness probe (with the
//! metrics refresher that reads its gauges), and a drain that also waits
//! for a WAL-mode schema's slot.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;
use outbox::{Publisher, Relay, RelayHandle, Schema, Status};
use sqlx::PgPool;

use super::wiring::{Around, DrainCheck, Started};
use crate::ctx::Ctx;
use crate::daemon::db_probe::{self, DbProbe};
use crate::daemon::http::{Readiness, Ready};
use crate::daemon::metrics::{self, Metrics, SourceMetrics};
use crate::db;
use outbox_publishers::registry as publisher;

/// How often `--drain` counts what is pending (and shows progress).
const DRAIN_TICK: Duration = Duration::from_millis(100);

/// Connected, not yet started.
pub(super) struct Prepared {
    url: String,
    publisher: Arc<dyn Publisher>,
    pool: PgPool,
    source: SourceMetrics,
    /// With an HTTP server: the metrics refresher's pool and `/readyz`'s
    /// database probe.
    side: Option<(PgPool, DbProbe)>,
}

/// The publisher, the relay's pool and, with an HTTP server, the
/// connections of the probe and the metrics refresher: opened before the
/// relay starts, so a failure leaves nothing half-started.
pub(super) async fn connect(
    ctx: &Ctx,
    url: String,
    metrics: &Metrics,
    http: bool,
) -> Result<Prepared> {
    let c = &ctx.loaded.config;
    let schema = &ctx.schema;
    let publisher = publisher::from_config(&c.publisher.spec, &c.publisher.tables, c.envelope()?)?;
    tracing::debug!(database = %db::redact_text(&url), "connecting");
    // Worker, leases, wake-up listener, claim-ahead, and the cleaner.
    let pool = db::connect(&url, 6).await?;
    crate::daemon::session_check::require_sessions(&pool).await?;
    // The one source is named after its schema.
    let source = metrics.source(schema.name());
    let side = if http {
        let timeout = Duration::from_millis(c.http.check_timeout_ms);
        let probe = DbProbe::new(&url, schema.clone(), source.clone(), timeout)?;
        Some((db::connect(&url, 2).await?, probe))
    } else {
        None
    };
    Ok(Prepared {
        url,
        publisher,
        pool,
        source,
        side,
    })
}

impl Prepared {
    /// Starts the relay, and the metrics refresher beside it.
    pub(super) async fn spawn(self, ctx: &Ctx, around: Around<'_>) -> Result<Started<One>> {
        let c = &ctx.loaded.config;
        let schema = &ctx.schema;
        let mut builder = Relay::builder(self.pool.clone(), self.publisher.clone())
            .schema(schema.clone())
            .config(c.relay.clone());
        // Used only when the schema is in the WAL mode: the slot is read over
        // a replication connection to the same server.
        if let Ok(target) = outbox::ReplicationTarget::from_url(&self.url) {
            builder = builder.replication(target);
        }
        if self.side.is_some() {
            builder = builder.observer(Arc::new(self.source.clone()));
        }
        #[cfg(feature = "opentelemetry")]
        if let Some(export) = around.export {
            builder = builder.tracer(export.tracer());
        }
        let relay = builder.spawn().await?;
        let info = metrics::RelayInfo {
            version: env!("CARGO_PKG_VERSION").to_owned(),
            instance_id: relay.instance_id().to_owned(),
            schema: schema.name().to_owned(),
            publisher: self.publisher.name().to_owned(),
        };
        let mut background = Vec::new();
        let readiness = self.side.map(|(side, probe)| {
            background.push(tokio::spawn(db_probe::refresh_loop(
                self.source.clone(),
                probe.clone(),
                side,
                schema.clone(),
                Duration::from_millis(c.http.refresh_ms),
                around.stopped,
            )));
            Ready::One(Readiness {
                db: probe,
                publisher: self.publisher.clone(),
                state: around.state.clone(),
                metrics: self.source.clone(),
                timeout: Duration::from_millis(c.http.check_timeout_ms),
            })
        });
        Ok(Started {
            running: One {
                relay,
                pool: self.pool,
                schema: schema.clone(),
                publisher: self.publisher.name().to_owned(),
                keeps: c.relay.retention == outbox::Retention::Keep,
                wal_end: None,
            },
            readiness,
            background,
            info,
        })
    }
}

/// The running relay of one source.
pub(super) struct One {
    pub(super) relay: RelayHandle,
    pool: PgPool,
    schema: Schema,
    publisher: String,
    /// Retention mode: processed rows are kept, for the cleaner.
    keeps: bool,
    /// With `--drain`: the end of the WAL when the drain began. Drained
    /// also means a WAL-mode schema's slot is read past it (events may
    /// wait in it, behind WAL that is not theirs).
    wal_end: Option<String>,
}

impl One {
    pub(super) fn log_running(&self, drain: bool) {
        tracing::info!(
            instance = self.relay.instance_id(),
            publisher = self.publisher,
            drain,
            "relay running"
        );
    }

    pub(super) fn drain_tick(&self) -> Duration {
        DRAIN_TICK
    }

    /// The schema to clean, with the relay's pool, in retention mode.
    pub(super) fn kept(&self) -> Option<(PgPool, Schema)> {
        self.keeps.then(|| (self.pool.clone(), self.schema.clone()))
    }

    /// Events left to deliver: in the table, plus one while the schema's
    /// slot is not yet confirmed to the end of the WAL when the drain
    /// began (how many wait in it is not known until they are read).
    pub(super) async fn pending(&mut self) -> Result<i64, DrainCheck> {
        let mut conn = self.pool.acquire().await?;
        let wal_end = match &self.wal_end {
            Some(lsn) => lsn.clone(),
            None => {
                let lsn = Status::wal_end(&mut conn).await?;
                self.wal_end.insert(lsn).clone()
            }
        };
        let in_table = match Status::pending(&mut conn, &self.schema).await {
            Ok(n) => n,
            Err(e) if e.is_missing_table() => {
                return Err(DrainCheck::unmigrated(None, self.schema.name()))
            }
            Err(e) => return Err(e.into()),
        };
        let slot_read = Status::slot_confirmed_to(&mut conn, &self.schema, &wal_end).await?;
        Ok(in_table + i64::from(!slot_read))
    }
}
