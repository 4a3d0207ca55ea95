//! The dormant sources, the database's side: their announcements (that
//! producers are to wake them) renewed, and the check for work a wake-up
//! missed and for due retries, one statement per chunk of schemas.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::queries as q;
use crate::relay::sources::shared::{SourceShared, UNCOUNTED};
use crate::relay::sources::{sql, SchemaSelector, SourceState};
use crate::schema::Schema;

use super::State;

/// The full dormant check covers every dormant source once per this many
/// rounds of `check_interval`.
const FULL_CHECK_ROUNDS: usize = 30;

/// Schemas per statement of the check and the announcements: bounds the
/// statement's size (and its planning) however many schemas match.
const CHUNK: usize = 250;

impl State {
    /// Announces `sources` as idle whatever stands: they begin dormant, and
    /// producers' commits are to wake them.
    pub(super) async fn announce_new(&mut self, sources: &[Arc<SourceShared>], lease_ms: u64) {
        if sources.is_empty() {
            return;
        }
        let schemas: Vec<&Schema> = sources.iter().map(|s| &s.schema).collect();
        for chunk in schemas.chunks(CHUNK) {
            if let Err(e) = sqlx::query(&sql::announcement_new(chunk))
                .bind(lease_ms as i64)
                .persistent(false)
                .execute(&self.pool)
                .await
            {
                tracing::debug!(error = %e, "could not announce new sources as idle; the dormant check finds their work");
            }
        }
        for chunk in sources.chunks(CHUNK) {
            self.check_full(chunk).await;
        }
    }

    /// Renews the dormant sources' standing announcements.
    pub(super) async fn renew(&self, lease_ms: u64) {
        let dormant = self.dormant();
        let schemas: Vec<&Schema> = dormant.iter().map(|s| &s.schema).collect();
        for chunk in schemas.chunks(CHUNK) {
            if let Err(e) = sqlx::query(&sql::announcement_renew(chunk))
                .bind(lease_ms as i64)
                .persistent(false)
                .execute(&self.pool)
                .await
            {
                tracing::debug!(error = %e, "could not renew the dormant sources' announcements; the dormant check finds their work");
            }
        }
    }

    /// The dormant check, every `check_interval`: the cheap one over every
    /// source (a dormant source whose table counted inserts since the last
    /// look is woken; a missing table is the source's problem), and the
    /// full one over the next slice of dormant sources, so each is fully
    /// checked every [`FULL_CHECK_ROUNDS`] rounds.
    /// Returns whether a schema found by a pattern has lost its table.
    pub(super) async fn check(&mut self) -> bool {
        let lost = self.check_counted().await;
        let dormant = self.dormant();
        if dormant.is_empty() {
            return lost;
        }
        let slice = dormant.len().div_ceil(FULL_CHECK_ROUNDS);
        let start = self.full_check_next % dormant.len();
        let chunk: Vec<Arc<SourceShared>> = dormant
            .iter()
            .cycle()
            .skip(start)
            .take(slice)
            .cloned()
            .collect();
        self.full_check_next = start + slice;
        self.check_full(&chunk).await;
        lost
    }

    /// Every source at once, on its first check.
    pub(super) async fn check_everything(&mut self) {
        let _ = self.check_counted().await;
        let dormant = self.dormant();
        for chunk in dormant.chunks(CHUNK) {
            self.check_full(chunk).await;
        }
    }

    /// The cheap check; returns whether a schema found by a pattern has
    /// lost its table.
    pub(super) async fn check_counted(&self) -> bool {
        let mut lost = false;
        let sources: Vec<Arc<SourceShared>> =
            self.served.values().map(|s| s.shared.clone()).collect();
        let names: Vec<String> = sources
            .iter()
            .map(|s| format!("{}.outbox_events", s.schema.name()))
            .collect();
        let counted: Result<Vec<i64>, sqlx::Error> = sqlx::query_scalar(q::SOURCE_INSERTS_COUNTED)
            .bind(&names)
            .fetch_all(&self.pool)
            .await;
        match counted {
            Ok(counted) => {
                for (src, n) in sources.iter().zip(counted) {
                    if n < 0 {
                        lost |= self.served.get(src.schema.name()).is_some_and(|s| {
                            matches!(self.db.defs[s.def].selector, SchemaSelector::Pattern(_))
                        });
                        src.database_problem(Some(format!(
                            "{}.outbox_events does not exist: run `outbox migrate --schema {}`",
                            src.schema.name(),
                            src.schema.name()
                        )));
                        continue;
                    }
                    let before = src.inserts_seen.swap(n, Ordering::Relaxed);
                    if src.state() == SourceState::Dormant {
                        src.database_problem(None);
                        if before != UNCOUNTED && before != n {
                            src.wakeup.wake_local();
                        }
                    }
                }
            }
            Err(e) => {
                for src in &sources {
                    if src.state() == SourceState::Dormant {
                        src.database_problem(Some(format!("the database is unavailable: {e}")));
                    }
                }
            }
        }
        lost
    }

    /// The full check of `chunk`: wakes each with claimable work. One
    /// statement for all; if the database answers it with an error (a
    /// schema dropped under it), one per source, so one source's problem
    /// is not every source's.
    pub(super) async fn check_full(&self, chunk: &[Arc<SourceShared>]) {
        let schemas: Vec<&Schema> = chunk.iter().map(|s| &s.schema).collect();
        let found: Result<Vec<i32>, sqlx::Error> = sqlx::query_scalar(&sql::work_found(&schemas))
            .persistent(false)
            .fetch_all(&self.pool)
            .await;
        match found {
            Ok(found) => {
                for (i, src) in chunk.iter().enumerate() {
                    if found.contains(&(i as i32)) {
                        src.wakeup.wake_local();
                    }
                }
            }
            Err(sqlx::Error::Database(_)) => {
                for src in chunk {
                    let one = sql::work_found(&[&src.schema]);
                    match sqlx::query_scalar::<_, i32>(&one)
                        .persistent(false)
                        .fetch_optional(&self.pool)
                        .await
                    {
                        Ok(Some(_)) => src.wakeup.wake_local(),
                        Ok(None) => {}
                        Err(e) => {
                            src.database_problem(Some(format!("the dormant check failed: {e}")))
                        }
                    }
                }
            }
            Err(e) => {
                for src in chunk {
                    src.database_problem(Some(format!("the database is unavailable: {e}")));
                }
            }
        }
    }

    pub(super) fn dormant(&self) -> Vec<Arc<SourceShared>> {
        self.served
            .values()
            .filter(|s| s.shared.state() == SourceState::Dormant)
            .map(|s| s.shared.clone())
            .collect()
    }
}
