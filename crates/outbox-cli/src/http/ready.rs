//! `/readyz`: is this relay able to do its job? The database answers, the
//! publisher's health check passes, and the relay is running (holding
//! partitions, or waiting for a lease while others hold them all).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use outbox::Publisher;
use serde_json::{json, Value};
use sqlx::postgres::{PgConnectOptions, PgConnection};
use sqlx::Connection;
use tokio::sync::Mutex;

use crate::db::redact_text;
use crate::metrics::Metrics;

/// What the relay loop tells the readiness check.
#[derive(Debug, Default)]
pub struct RelayState {
    /// The relay's tasks are running.
    pub running: AtomicBool,
    /// A shutdown signal arrived.
    pub stopping: AtomicBool,
    /// Partitions held right now.
    pub held: AtomicUsize,
}

/// One connection of its own, kept open between checks and opened again
/// when it breaks, so a check never waits behind the relay's pool and a
/// failure says what went wrong (refused, authentication, …).
pub struct DbProbe {
    options: PgConnectOptions,
    conn: Mutex<Option<PgConnection>>,
}

impl DbProbe {
    /// A probe for `url` (connects at the first check).
    pub fn new(url: &str) -> anyhow::Result<Self> {
        Ok(DbProbe {
            options: url.parse()?,
            conn: Mutex::new(None),
        })
    }

    /// `SELECT 1`, reconnecting once if the kept connection broke.
    async fn ping(&self) -> Result<(), String> {
        let mut slot = self.conn.lock().await;
        // Taken out while in use: if the check is cancelled by its
        // timeout, the connection is dropped rather than reused mid-query.
        if let Some(mut conn) = slot.take() {
            if sqlx::query("SELECT 1").execute(&mut conn).await.is_ok() {
                *slot = Some(conn);
                return Ok(());
            }
        }
        let mut conn = PgConnection::connect_with(&self.options)
            .await
            .map_err(|e| e.to_string())?;
        sqlx::query("SELECT 1")
            .execute(&mut conn)
            .await
            .map_err(|e| e.to_string())?;
        *slot = Some(conn);
        Ok(())
    }
}

/// The readiness checks.
pub struct Readiness {
    /// The database check.
    pub db: DbProbe,
    /// The relay's publisher.
    pub publisher: Arc<dyn Publisher>,
    /// Set by the relay loop.
    pub state: Arc<RelayState>,
    /// For the partition count.
    pub metrics: Arc<Metrics>,
    /// How long each check may take.
    pub timeout: Duration,
}

/// One check's verdict.
fn verdict(ok: bool, mut detail: Value, error: Option<String>) -> Value {
    detail["ok"] = json!(ok);
    if let Some(e) = error {
        detail["error"] = json!(redact_text(&e));
    }
    detail
}

impl Readiness {
    async fn database(&self) -> Result<(), String> {
        match tokio::time::timeout(self.timeout, self.db.ping()).await {
            Ok(r) => r,
            Err(_) => Err(format!("no answer within {} ms", self.timeout.as_millis())),
        }
    }

    async fn publisher(&self) -> Result<(), String> {
        match tokio::time::timeout(self.timeout, self.publisher.health()).await {
            Ok(r) => r.map_err(|e| e.message),
            Err(_) => Err(format!("no answer within {} ms", self.timeout.as_millis())),
        }
    }

    /// Runs every check: (ready, JSON body).
    pub async fn check(&self) -> (bool, Value) {
        let (db, publisher) = tokio::join!(self.database(), self.publisher());
        let held = self.state.held.load(Ordering::Relaxed);
        let (_, total) = self.metrics.partitions();
        let (relay_ok, relay_state, relay_error) = if self.state.stopping.load(Ordering::Relaxed) {
            (false, "stopping", Some("shutting down".to_owned()))
        } else if !self.state.running.load(Ordering::Relaxed) {
            (
                false,
                "stopped",
                Some("the relay is not running".to_owned()),
            )
        } else if held == 0 {
            (true, "waiting for a partition lease", None)
        } else {
            (true, "running", None)
        };

        let mut problems = Vec::new();
        if let Err(e) = &db {
            problems.push(format!("database: {}", redact_text(e)));
        }
        if let Err(e) = &publisher {
            problems.push(format!(
                "publisher {}: {}",
                self.publisher.name(),
                redact_text(e)
            ));
        }
        if let Some(e) = &relay_error {
            problems.push(format!("relay: {e}"));
        }
        let ready = problems.is_empty();
        let body = json!({
            "status": if ready { "ready" } else { "not ready" },
            "problems": problems,
            "checks": {
                "database": verdict(db.is_ok(), json!({}), db.err()),
                "publisher": verdict(
                    publisher.is_ok(),
                    json!({ "name": self.publisher.name() }),
                    publisher.err(),
                ),
                "relay": verdict(
                    relay_ok,
                    json!({
                        "state": relay_state,
                        "partitions_owned": held,
                        "partitions_total": total,
                    }),
                    relay_error,
                ),
            },
        });
        (ready, body)
    }
}
