//! `/readyz`: is this relay able to do its job? The database answers, the
//! publisher's health check passes, and the relay is running (holding
//! partitions, or waiting for a lease while others hold them all).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use outbox::Publisher;
use serde_json::{json, Value};

// Every message shown by `/readyz` or logged here goes through the
// library's one redaction.
use outbox::redact::redact_text;

use crate::daemon::db_probe::DbProbe;
use crate::daemon::metrics::SourceMetrics;

/// What the relay loop tells the readiness check.
#[derive(Debug, Default)]
pub struct RelayState {
    /// The relay's tasks are running.
    pub running: AtomicBool,
    /// A shutdown signal arrived.
    pub stopping: AtomicBool,
}

/// The readiness checks.
pub struct Readiness {
    /// The database check.
    pub db: DbProbe,
    /// The relay's publisher.
    pub publisher: Arc<dyn Publisher>,
    /// Set by the relay loop.
    pub state: Arc<RelayState>,
    /// The source's metrics, for the partition count.
    pub metrics: SourceMetrics,
    /// How long the publisher's check may take.
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
        // The probe bounds its own check by the same timeout.
        self.db.check().await
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
        // As of the relay's last lease round, told to the metrics.
        let (held, total) = self.metrics.partitions();
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
