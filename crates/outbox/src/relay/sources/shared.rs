//! What is kept of one source while it is served ([`SourceShared`]: its
//! state, problems, statistics and wake-ups, across its workers), and what
//! its task is given ([`SourceCtx`]). Read by the source's task
//! (`source.rs`), its slot reader (`slot.rs`) and its database's loop.

use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;

use super::{SourceState, SourceStatus};
use crate::publisher::Publisher;
use crate::relay::observe::{RelayObserver, RelayStats};
use crate::relay::RelayConfig;
use crate::schema::Schema;
use crate::wakeup::Wakeup;

/// What is kept of a source while it is served, across its workers.
pub(crate) struct SourceShared {
    pub name: String,
    pub database: String,
    pub schema: Schema,
    /// Producers' commits (through the database's listener) and the dormant
    /// check wake it here.
    pub wakeup: Arc<Wakeup>,
    /// Another instance announced a partition change on its channel.
    pub rebalance: Arc<Notify>,
    pub stats: Arc<RelayStats>,
    pub(super) state: Mutex<SourceState>,
    /// The database's problem (down, tables missing), cleared by a lease
    /// round or a check that succeeds.
    pub(super) database_problem: Mutex<Option<String>>,
    /// The broker's, cleared by a batch that got through.
    pub(super) broker_problem: Mutex<Option<String>>,
    pub(super) held: AtomicUsize,
    /// The inserts its table had seen at the last cheap check
    /// ([`UNCOUNTED`] before the first).
    pub inserts_seen: AtomicI64,
}

/// [`SourceShared::inserts_seen`] before the first count.
pub(crate) const UNCOUNTED: i64 = i64::MIN;

impl SourceShared {
    pub fn new(name: String, database: String, schema: Schema) -> Self {
        SourceShared {
            name,
            database,
            schema,
            wakeup: Wakeup::local(),
            rebalance: Arc::new(Notify::new()),
            stats: Arc::new(RelayStats::default()),
            state: Mutex::new(SourceState::Dormant),
            database_problem: Mutex::new(None),
            broker_problem: Mutex::new(None),
            held: AtomicUsize::new(0),
            inserts_seen: AtomicI64::new(UNCOUNTED),
        }
    }

    pub fn state(&self) -> SourceState {
        *self.state.lock().expect("source lock")
    }

    pub(super) fn set_state(&self, state: SourceState) {
        *self.state.lock().expect("source lock") = state;
    }

    /// Sets or clears the database's problem; a new one is logged once.
    pub fn database_problem(&self, problem: Option<String>) {
        let mut slot = self.database_problem.lock().expect("source lock");
        match (&*slot, &problem) {
            (None, Some(p)) => {
                tracing::warn!(source = %self.name, problem = %p, "source unhealthy; retrying")
            }
            (Some(_), None) => tracing::info!(source = %self.name, "source healthy again"),
            _ => {}
        }
        *slot = problem;
    }

    pub fn status(&self) -> SourceStatus {
        let problem = self
            .database_problem
            .lock()
            .expect("source lock")
            .clone()
            .or_else(|| self.broker_problem.lock().expect("source lock").clone());
        SourceStatus {
            name: self.name.clone(),
            database: self.database.clone(),
            schema: self.schema.name().to_owned(),
            state: self.state(),
            problem,
            held: self.held.load(Ordering::Relaxed),
            stats: self.stats.snapshot(),
        }
    }
}

/// What a source's task needs besides its [`SourceShared`].
pub(crate) struct SourceCtx {
    pub pool: sqlx::PgPool,
    pub config: RelayConfig,
    pub publisher: Arc<dyn Publisher>,
    pub observer: Option<Arc<dyn RelayObserver>>,
    pub instance_id: String,
    pub dormant_after: Duration,
    /// Where a WAL-mode schema's slot is read from.
    pub replication: Option<crate::relay::wal::ReplicationTarget>,
    /// Opens publish spans (feature `opentelemetry`).
    #[cfg(feature = "opentelemetry")]
    pub tracer: Option<Arc<crate::trace::PublishTracer>>,
}
