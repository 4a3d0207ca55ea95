//! `/readyz` of a relay of many sources: each source's health (its database
//! answers and its tables exist, its broker takes batches), judged by the
//! `[sources] ready` policy, and the publishers' own checks.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use outbox::sources::SourcesView;
use outbox::Publisher;
use serde_json::{json, Value};

use super::ready::RelayState;
use crate::db::redact_text;

/// The readiness checks of a relay of many sources.
pub struct SourcesReadiness {
    /// The sources' statuses.
    pub sources: SourcesView,
    /// Every distinct publisher.
    pub publishers: Vec<Arc<dyn Publisher>>,
    /// Set by the relay loop.
    pub state: Arc<RelayState>,
    /// Ready only while every source is healthy (`ready = "all"`); else
    /// while at least one is (`"any"`).
    pub all: bool,
    /// How long each publisher's check may take.
    pub timeout: Duration,
}

impl SourcesReadiness {
    /// Runs every check: (ready, JSON body).
    pub async fn check(&self) -> (bool, Value) {
        let statuses = self.sources.statuses();
        let unhealthy: Vec<Value> = statuses
            .iter()
            .filter(|s| !s.healthy())
            .map(|s| {
                json!({
                    "source": s.name,
                    "error": redact_text(s.problem.as_deref().unwrap_or_default()),
                })
            })
            .collect();
        let healthy = statuses.len() - unhealthy.len();
        let mut problems = Vec::new();
        let found = self.sources.found_all();
        let sources_ok = if self.all {
            unhealthy.is_empty() && !statuses.is_empty() && found
        } else {
            healthy > 0
        };
        if !sources_ok {
            for u in &unhealthy {
                problems.push(format!(
                    "source {}: {}",
                    u["source"].as_str().unwrap_or_default(),
                    u["error"].as_str().unwrap_or_default()
                ));
            }
            if statuses.is_empty() {
                problems.push("no source is served (no schema matched yet?)".to_owned());
            } else if !found {
                problems.push(
                    "not every entry's schemas are known yet (a pattern not matched once: is its database answering?)"
                        .to_owned(),
                );
            }
        }
        let mut publishers = Vec::new();
        for p in &self.publishers {
            let verdict = match tokio::time::timeout(self.timeout, p.health()).await {
                Ok(r) => r.map_err(|e| e.message),
                Err(_) => Err(format!("no answer within {} ms", self.timeout.as_millis())),
            };
            if let Err(e) = &verdict {
                problems.push(format!("publisher {}: {}", p.name(), redact_text(e)));
            }
            publishers.push(json!({
                "name": p.name(),
                "ok": verdict.is_ok(),
                "error": verdict.err().map(|e| redact_text(&e)),
            }));
        }
        if self.state.stopping.load(Ordering::Relaxed) {
            problems.push("relay: shutting down".to_owned());
        }
        let ready = problems.is_empty();
        let body = json!({
            "status": if ready { "ready" } else { "not ready" },
            "problems": problems,
            "checks": {
                "sources": {
                    "ok": sources_ok,
                    "policy": if self.all { "all" } else { "any" },
                    "total": statuses.len(),
                    "healthy": healthy,
                    "active": statuses.iter().filter(|s| s.state == outbox::sources::SourceState::Active).count(),
                    "unhealthy": unhealthy,
                },
                "publishers": publishers,
            },
        });
        (ready, body)
    }
}
