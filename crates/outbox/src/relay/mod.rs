//! The relay engine: publishes committed events, in order per aggregate, at
//! least once. Embed it with [`Relay::builder`]; the `outbox relay` program
//! runs the same engine.

mod assembly;
mod backoff;
mod config;
mod cursor;
mod decode;
mod deliver;
mod lease;
mod listen;
mod observe;
mod ownership;
mod replan;
pub mod sources;
mod store;
#[cfg(feature = "test-seam")]
#[doc(hidden)]
pub mod test_seam;
pub(crate) mod wal;
mod worker;

use std::sync::Arc;
use std::time::Duration;

use sqlx::PgPool;
use tokio::sync::watch;
use tokio::task::JoinHandle;

pub use config::{RelayConfig, Retention};
pub use observe::{BatchReport, OutageKind, RelayObserver, RelayStats, StatsSnapshot};

use crate::error::{Error, Result};
use crate::publisher::Publisher;
use crate::schema::Schema;
use crate::wakeup::Wakeup;
use assembly::{Assembly, TableStart};
use listen::listen_loop;
use ownership::Ownership;

/// Entry point: `Relay::builder(pool, publisher)…spawn()`.
#[derive(Debug)]
pub struct Relay;

impl Relay {
    /// Starts building a relay that reads from `pool` and publishes with
    /// `publisher`. The pool needs at least 3 connections (worker, leases,
    /// wake-up listener).
    pub fn builder(pool: PgPool, publisher: impl Publisher) -> RelayBuilder {
        RelayBuilder {
            pool,
            publisher: Arc::new(publisher),
            config: RelayConfig::default(),
            schema: Schema::default(),
            wakeup: None,
            observer: None,
            replication: None,
            #[cfg(feature = "opentelemetry")]
            tracer: None,
        }
    }
}

/// Configures and starts a relay.
pub struct RelayBuilder {
    pool: PgPool,
    publisher: Arc<dyn Publisher>,
    config: RelayConfig,
    schema: Schema,
    wakeup: Option<Arc<Wakeup>>,
    observer: Option<Arc<dyn RelayObserver>>,
    replication: Option<wal::ReplicationTarget>,
    #[cfg(feature = "opentelemetry")]
    tracer: Option<Arc<crate::trace::PublishTracer>>,
}

impl RelayBuilder {
    /// Where the relay opens its replication connection when the schema is
    /// in the WAL mode (`outbox migrate --mode wal`): the PostgreSQL server
    /// itself, never a pooler. A relay of a WAL-mode schema without one
    /// refuses to start; a table-mode schema does not use it.
    pub fn replication(mut self, target: wal::ReplicationTarget) -> Self {
        self.replication = Some(target);
        self
    }

    /// Replaces the settings.
    pub fn config(mut self, config: RelayConfig) -> Self {
        self.config = config;
        self
    }

    /// The schema holding the outbox (default `public`).
    pub fn schema(mut self, schema: Schema) -> Self {
        self.schema = schema;
        self
    }

    /// Shares in-process wake-ups with producers: pass
    /// `outbox.wakeup()` so `outbox.wake()` after a commit reaches this
    /// relay at once.
    pub fn wakeup(mut self, wakeup: Arc<Wakeup>) -> Self {
        self.wakeup = Some(wakeup);
        self
    }

    /// Adds an observer (metrics).
    pub fn observer(mut self, observer: Arc<dyn RelayObserver>) -> Self {
        self.observer = Some(observer);
        self
    }

    /// Traces publishing with `tracer` (feature `opentelemetry`): each event
    /// whose stored `traceparent` parses gets a `publish` span, child of
    /// that context, ended with the publisher's outcome, and is handed to
    /// the publisher with a `traceparent` naming that span (`tracestate` as
    /// stored). Events without one, or with one that does not parse, are
    /// published as stored, without a span. Without a tracer the relay
    /// reads no trace header at all.
    #[cfg(feature = "opentelemetry")]
    pub fn tracer<T>(mut self, tracer: T) -> Self
    where
        T: opentelemetry::trace::Tracer + Send + Sync + 'static,
        T::Span: Send + Sync + 'static,
    {
        self.tracer = Some(Arc::new(crate::trace::PublishTracer::new(tracer)));
        self
    }

    /// Validates the settings, checks the schema and starts the relay's
    /// tasks on the current tokio runtime: the wake-up listener, and what
    /// serves the schema ([`assembly`]: the lease round, the worker and, in
    /// the WAL mode, the slot reader).
    pub async fn spawn(self) -> Result<RelayHandle> {
        self.config.validate()?;
        {
            let mut conn = self.pool.acquire().await.map_err(Error::db("connecting"))?;
            crate::migrate::ensure_migrated(&mut conn, &self.schema).await?;
        }
        let slot = self.first_slot_session().await?;
        let instance_id = self.config.resolved_instance_id();
        let parts = Assembly {
            pool: self.pool,
            schema: self.schema,
            publisher: self.publisher,
            config: self.config,
            stats: Arc::new(RelayStats::default()),
            observer: self.observer,
            wakeup: self.wakeup.unwrap_or_else(Wakeup::local),
            rebalance: Arc::new(tokio::sync::Notify::new()),
            #[cfg(feature = "opentelemetry")]
            tracer: self.tracer,
        };
        let store = parts.store();
        let partitions = store.partition_count().await?;
        let lease = Duration::from_millis(parts.config.lease_ms);
        let ownership = Ownership::new(instance_id.clone(), partitions, lease);
        let (shutdown_tx, shutdown_rx) = watch::channel(false);
        let mut tasks = Vec::new();
        if parts.config.listen {
            tasks.push(tokio::spawn(listen_loop(
                parts.pool.clone(),
                parts.schema.channel(),
                parts.wakeup.clone(),
                parts.rebalance.clone(),
            )));
        }
        let table = parts.start_table(TableStart {
            store,
            ownership: ownership.clone(),
            total: partitions as usize,
            first_round_done: false,
            reads_slot: slot.is_some(),
            dormant_after: None,
            shutdown: shutdown_rx.clone(),
        });
        tasks.push(table.lease);
        tracing::info!(instance = %instance_id, partitions, publisher = parts.publisher.name(), "relay started");
        let (reader, slot_state) = match slot {
            Some(s) => {
                let (task, state) =
                    parts.start_reader(s.target, shutdown_rx, s.slot, s.publication, s.first);
                (Some(task), state)
            }
            None => (None, Arc::new(wal::SlotState::default())),
        };
        Ok(RelayHandle {
            instance_id,
            shutdown: shutdown_tx,
            worker: table.worker,
            reader,
            slot: slot_state,
            tasks,
            stats: parts.stats,
            ownership,
        })
    }

    /// In the WAL mode (the schema has a recorded slot): the slot's first
    /// session, opened here so that a slot that cannot be read (gone,
    /// another's, a database not in UTF-8) refuses the start; `None` in
    /// the table mode.
    async fn first_slot_session(&self) -> Result<Option<FirstSession>> {
        let Some((slot, publication)) = crate::wal::recorded_slot(&self.pool, &self.schema).await?
        else {
            return Ok(None);
        };
        let Some(target) = self.replication.clone() else {
            return Err(Error::invalid(
                "replication",
                format!("schema {} is read through replication slot {slot} (outbox migrate --mode wal): give the relay the server's address for its replication connection (RelayBuilder::replication)", self.schema.name()),
            ));
        };
        crate::wal::setup::refuse_database_encoding(&self.pool).await?;
        let position = wal::position::Position::new(self.pool.clone(), &self.schema);
        let switch = wal::switch::Switch::new(self.pool.clone(), &self.schema);
        let first =
            wal::reader::first_session(&target, &slot, &publication, &position, &switch).await?;
        Ok(Some(FirstSession {
            slot,
            publication,
            target,
            first,
        }))
    }
}

/// A WAL-mode schema's slot, with its first session open (`None`: another
/// relay reads the slot and this one stands by, or the slot is gone while
/// a switch back to the table mode needs no more of it).
struct FirstSession {
    slot: String,
    publication: String,
    target: wal::ReplicationTarget,
    first: Option<wal::session::Session>,
}

/// A running relay.
pub struct RelayHandle {
    instance_id: String,
    shutdown: watch::Sender<bool>,
    worker: JoinHandle<Result<worker::Exit>>,
    /// The WAL mode's slot reader, when the schema has a slot.
    reader: Option<JoinHandle<Result<()>>>,
    slot: Arc<wal::SlotState>,
    tasks: Vec<JoinHandle<()>>,
    stats: Arc<RelayStats>,
    ownership: Arc<Ownership>,
}

impl std::fmt::Debug for RelayHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RelayHandle")
            .field("instance_id", &self.instance_id)
            .finish_non_exhaustive()
    }
}

impl RelayHandle {
    /// This instance's id.
    pub fn instance_id(&self) -> &str {
        &self.instance_id
    }

    /// Running totals.
    pub fn stats(&self) -> StatsSnapshot {
        self.stats.snapshot()
    }

    /// Partitions held right now.
    pub fn held_partitions(&self) -> usize {
        self.ownership.held_count()
    }

    /// Whether the relay has stopped (after shutdown, or a fatal error).
    /// The slot reader ending on its own after a switch back to the table
    /// mode does not count; ending with an error does.
    pub fn is_finished(&self) -> bool {
        self.worker.is_finished()
            || self
                .reader
                .as_ref()
                .is_some_and(|r| r.is_finished() && !self.slot.finished_cleanly())
    }

    /// The WAL mode's slot, as this relay reads it (inactive in the table
    /// mode, or while another relay reads the slot).
    pub fn slot(&self) -> &wal::SlotState {
        &self.slot
    }

    /// Graceful stop: no new claims, the in-flight batch is published and
    /// acknowledged, partitions are released for other instances at once.
    /// Returns the final totals.
    pub async fn shutdown(self) -> Result<StatsSnapshot> {
        let _ = self.shutdown.send(true);
        let read = match self.reader {
            Some(reader) => reader.await.unwrap_or(Ok(())),
            None => Ok(()),
        };
        let result = match self.worker.await {
            Ok(r) => r.map(|_| self.stats.snapshot()),
            Err(e) => {
                tracing::error!(error = %e, "relay worker panicked");
                Ok(self.stats.snapshot())
            }
        };
        for t in &self.tasks {
            t.abort();
        }
        read.and(result)
    }

    /// [`RelayHandle::shutdown`] with a deadline; past it the relay is
    /// aborted (its partitions then move when their leases end).
    pub async fn shutdown_within(self, deadline: Duration) -> Result<StatsSnapshot> {
        let _ = self.shutdown.send(true);
        let tasks = self.tasks;
        let mut worker = self.worker;
        let started = std::time::Instant::now();
        if let Some(mut reader) = self.reader {
            match tokio::time::timeout(deadline, &mut reader).await {
                Ok(Ok(Err(e))) => {
                    tracing::warn!(error = %e, "the slot reader had stopped with an error")
                }
                Ok(_) => {}
                Err(_) => {
                    reader.abort();
                    worker.abort();
                    for t in &tasks {
                        t.abort();
                    }
                    return Err(Error::ShutdownTimeout(deadline));
                }
            }
        }
        let deadline_left = deadline.saturating_sub(started.elapsed());
        let result = match tokio::time::timeout(deadline_left, &mut worker).await {
            Ok(Ok(r)) => r.map(|_| self.stats.snapshot()),
            Ok(Err(_)) => Ok(self.stats.snapshot()),
            Err(_) => {
                worker.abort();
                Err(Error::ShutdownTimeout(deadline))
            }
        };
        for t in &tasks {
            t.abort();
        }
        result
    }

    /// Stops every task at once without releasing anything, as a crash
    /// would (for tests of crash recovery).
    pub fn abort(self) {
        self.worker.abort();
        if let Some(reader) = &self.reader {
            reader.abort();
        }
        for t in &self.tasks {
            t.abort();
        }
    }
}
