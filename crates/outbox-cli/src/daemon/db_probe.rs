//! The database check shared by `/readyz` and the `outbox_database_up`
//! gauge ([`DbProbe`]), and the loop that refreshes the database gauges
//! while that check passes ([`refresh_loop`]). Its own module, so that the
//! HTTP endpoints and the metrics both use it without using each other.

use std::sync::Arc;
use std::time::{Duration, Instant};

use outbox::Schema;
use sqlx::postgres::{PgConnectOptions, PgConnection};
use sqlx::{Connection, PgPool};
use tokio::sync::{watch, Mutex};

use crate::daemon::metrics::{DbGauges, SourceMetrics};
use crate::db::redact_text;

/// The database check, shared by `/readyz` and the `outbox_database_up`
/// gauge so they always agree: the relay's tables in the configured schema
/// can be queried. It keeps one connection of its own, opened again when it
/// breaks, so a check never waits behind the relay's pool and a failure says
/// what went wrong (refused, authentication, a missing table, …).
///
/// A verdict younger than [`FRESH`] is reused and one check runs at a time,
/// so a flood of `/readyz` requests costs the database at most one query a
/// second.
#[derive(Clone)]
pub struct DbProbe {
    inner: Arc<Probe>,
}

/// How long a verdict is reused.
const FRESH: Duration = Duration::from_secs(1);

/// One query that fails unless every table the relay works on exists and
/// can be read; `LIMIT 0` reads no row.
const TABLES: &str = "SELECT 1 FROM {schema}.outbox_events, {schema}.outbox_partitions, \
                      {schema}.outbox_relay_instances LIMIT 0";

struct Probe {
    options: PgConnectOptions,
    schema: Schema,
    sql: String,
    metrics: SourceMetrics,
    timeout: Duration,
    conn: Mutex<Option<PgConnection>>,
    last: std::sync::Mutex<Option<(Instant, Result<(), String>)>>,
}

impl DbProbe {
    /// A probe for `url` and `schema` (connects at the first check); each
    /// check may take `timeout`, and sets the source's
    /// `outbox_database_up` in `metrics`.
    pub fn new(
        url: &str,
        schema: Schema,
        metrics: SourceMetrics,
        timeout: Duration,
    ) -> anyhow::Result<Self> {
        Ok(DbProbe {
            inner: Arc::new(Probe {
                options: url.parse()?,
                // A validated schema name never needs quoting.
                sql: TABLES.replace("{schema}", schema.name()),
                schema,
                metrics,
                timeout,
                conn: Mutex::new(None),
                last: std::sync::Mutex::new(None),
            }),
        })
    }

    /// The current verdict: the last one if fresh, else a new check. The
    /// check runs in a task of its own, so a caller that gives up (its
    /// client hung up) neither cancels it nor loses its connection.
    pub async fn check(&self) -> Result<(), String> {
        if let Some(fresh) = self.inner.fresh() {
            return fresh;
        }
        let probe = self.inner.clone();
        tokio::spawn(async move { probe.check().await })
            .await
            .unwrap_or_else(|e| Err(format!("the check failed: {e}")))
    }
}

impl Probe {
    fn fresh(&self) -> Option<Result<(), String>> {
        let last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        last.as_ref()
            .filter(|(at, _)| at.elapsed() < FRESH)
            .map(|(_, verdict)| verdict.clone())
    }

    async fn check(&self) -> Result<(), String> {
        // One check at a time; those that waited share its verdict.
        let mut slot = self.conn.lock().await;
        if let Some(fresh) = self.fresh() {
            return fresh;
        }
        let verdict = match tokio::time::timeout(self.timeout, self.query(&mut slot)).await {
            Ok(r) => r,
            Err(_) => Err(format!("no answer within {} ms", self.timeout.as_millis())),
        };
        self.record(&verdict);
        verdict
    }

    /// Queries the tables, reconnecting once if the kept connection broke.
    async fn query(&self, slot: &mut Option<PgConnection>) -> Result<(), String> {
        // Taken out while in use: if the check is cancelled by its
        // timeout, the connection is dropped rather than reused mid-query.
        if let Some(conn) = slot.take() {
            if let Ok(answered) = self.query_on(conn, slot).await {
                return answered;
            }
        }
        let conn = PgConnection::connect_with(&self.options)
            .await
            .map_err(|e| e.to_string())?;
        self.query_on(conn, slot).await?
    }

    /// The verdict of the query on `conn`, which is kept in `slot` if
    /// PostgreSQL answered; `Err` if the connection broke.
    async fn query_on(
        &self,
        mut conn: PgConnection,
        slot: &mut Option<PgConnection>,
    ) -> Result<Result<(), String>, String> {
        let error = match sqlx::query(&self.sql).execute(&mut conn).await {
            Ok(_) => {
                *slot = Some(conn);
                return Ok(Ok(()));
            }
            // Class 08 (connection exception) and 57 (operator
            // intervention, e.g. a shutdown) end the session.
            Err(sqlx::Error::Database(e))
                if !e
                    .code()
                    .is_some_and(|c| c.starts_with("08") || c.starts_with("57")) =>
            {
                e
            }
            Err(e) => return Err(e.to_string()),
        };
        // PostgreSQL answered: the connection is fine, the tables are not.
        let missing = matches!(error.code().as_deref(), Some("42P01" | "3F000"));
        let explained = if missing {
            // Names the missing table and the fix.
            match outbox::ensure_migrated(&mut conn, &self.schema).await {
                Err(e @ outbox::Error::NotMigrated { .. }) => Some(e.to_string()),
                _ => None,
            }
        } else {
            None
        };
        *slot = Some(conn);
        Ok(Err(explained.unwrap_or_else(|| error.to_string())))
    }

    /// Keeps the verdict, sets the gauge, and logs each change.
    fn record(&self, verdict: &Result<(), String>) {
        self.metrics.set_database_up(verdict.is_ok());
        let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        let before = last.replace((Instant::now(), verdict.clone()));
        let changed = match before {
            Some((_, previous)) => previous != *verdict,
            None => verdict.is_err(),
        };
        if changed {
            match verdict {
                Err(e) => {
                    tracing::warn!(error = %redact_text(e), "readiness: database check failing")
                }
                Ok(()) => tracing::info!("readiness: database check passing again"),
            }
        }
    }
}

/// Every `every` until `stop` turns true: runs the database check (which
/// sets `outbox_database_up`) and, when it passes, refreshes the database
/// gauges of the source `metrics` belongs to.
pub async fn refresh_loop(
    metrics: SourceMetrics,
    probe: DbProbe,
    pool: PgPool,
    schema: Schema,
    every: Duration,
    mut stop: watch::Receiver<bool>,
) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    while !*stop.borrow() {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stop.changed() => break,
        }
        if probe.check().await.is_err() {
            continue;
        }
        let read = async {
            let mut conn = pool.acquire().await.map_err(|e| e.to_string())?;
            DbGauges::read(&mut conn, &schema).await
        };
        match tokio::time::timeout(every.max(Duration::from_secs(1)), read).await {
            Ok(Ok(gauges)) => metrics.set_database_gauges(&gauges),
            Ok(Err(error)) => tracing::debug!(%error, "metrics refresh failed"),
            Err(_) => tracing::debug!("metrics refresh timed out"),
        }
    }
}
