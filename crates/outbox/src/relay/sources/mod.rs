//! One relay for many sources: each source is a database and a schema with
//! the outbox tables, named, with its own settings and publisher. Sources
//! are listed one by one, or found by a pattern over a database's schemas
//! and matched again periodically (and at once after `outbox migrate`).
//!
//! Per source, what one relay has: its own partition leases, claim cursor,
//! backoff and dead letters (they live in its schema), its own worker. What
//! sources of one database share: the connection pool, and one listener
//! connection that `LISTEN`s on every schema's wake-up channel.
//!
//! A source with nothing to do goes **dormant**: its worker releases its
//! partitions and ends, and costs nothing but its share of two statements
//! per database: the announcement's renewal (producers' trigger keeps
//! notifying, one statement for all dormant schemas, every third of a
//! lease) and the dormant check (one statement for all dormant schemas,
//! every `check_interval`, for work no wake-up announced: a due retry, a
//! lapsed announcement, rows of a relay that died). A wake-up on its
//! channel, or the check, starts its worker again.
//!
//! Fairness: every source with work runs its own worker, one batch at a
//! time, and the pool hands connections out in the order they were asked
//! for, so a source with a backlog takes one claim's turn among the sources
//! with work, never the whole pool.

mod database;
mod shared;
mod slot;
mod source;
mod sql;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sqlx::PgPool;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::{RelayConfig, RelayObserver, StatsSnapshot};
use crate::error::{Error, Result};
use crate::publisher::Publisher;
use crate::schema::Schema;
use shared::SourceShared;

/// Which schemas of a database a source entry serves.
#[derive(Debug, Clone)]
pub enum SchemaSelector {
    /// This one schema; the source has the entry's name.
    Schema(Schema),
    /// Every schema whose name matches (`*` any run, `?` one character) and
    /// holds the outbox tables; each is a source named `ENTRY/SCHEMA`.
    Pattern(String),
}

/// One entry of the sources' list.
pub struct SourceDef {
    /// The source's name (entries with a pattern: the prefix of their
    /// sources' names).
    pub name: String,
    /// Groups sources by database: entries with the same key share `pool`
    /// (give them the same pool) and one wake-up listener.
    pub database: String,
    /// The database's pool.
    pub pool: PgPool,
    /// Which schemas.
    pub selector: SchemaSelector,
    /// The relay's settings for this entry's sources.
    pub config: RelayConfig,
    /// Where this entry's events go. Shared between sources; closed once,
    /// when the relay stops.
    pub publisher: Arc<dyn Publisher>,
    /// Where a WAL-mode schema's replication slot is read from (the
    /// PostgreSQL server itself, never a pooler). A source whose schema is
    /// in the WAL mode without one reports that as its problem.
    pub replication: Option<crate::relay::wal::ReplicationTarget>,
}

/// Told when sources come and go (discovered schemas appear and vanish).
pub trait SourceObserver: Send + Sync + 'static {
    /// A source starts being served: the observer of its batches, if any.
    fn source_added(&self, name: &str) -> Option<Arc<dyn RelayObserver>>;
    /// A source is no longer served (its schema was dropped or no longer
    /// matches): forget what was kept for it.
    fn source_removed(&self, name: &str);
}

/// Settings of the relay of many sources.
#[derive(Debug, Clone)]
pub struct SourcesSettings {
    /// How often a database's dormant sources are checked for work no
    /// wake-up announced.
    pub check_interval: Duration,
    /// How often patterns are matched again.
    pub rescan_interval: Duration,
    /// How long a source's worker stays idle before it goes dormant.
    pub dormant_after: Duration,
    /// This process's instance id in every source (`None`: generated).
    pub instance_id: Option<String>,
}

impl Default for SourcesSettings {
    fn default() -> Self {
        SourcesSettings {
            check_interval: Duration::from_millis(1_000),
            rescan_interval: Duration::from_secs(30),
            dormant_after: Duration::from_millis(1_000),
            instance_id: None,
        }
    }
}

/// Entry point: `Sources::builder()…spawn()`.
#[derive(Debug)]
pub struct Sources;

impl Sources {
    /// Starts an empty list of sources.
    pub fn builder() -> SourcesBuilder {
        SourcesBuilder {
            defs: Vec::new(),
            settings: SourcesSettings::default(),
            observer: None,
            #[cfg(feature = "opentelemetry")]
            tracer: None,
        }
    }
}

/// Configures and starts the relay of many sources.
pub struct SourcesBuilder {
    defs: Vec<SourceDef>,
    settings: SourcesSettings,
    observer: Option<Arc<dyn SourceObserver>>,
    #[cfg(feature = "opentelemetry")]
    tracer: Option<Arc<crate::trace::PublishTracer>>,
}

impl SourcesBuilder {
    /// Adds an entry.
    pub fn source(mut self, def: SourceDef) -> Self {
        self.defs.push(def);
        self
    }

    /// Replaces the settings.
    pub fn settings(mut self, settings: SourcesSettings) -> Self {
        self.settings = settings;
        self
    }

    /// Is told of sources as they come and go.
    pub fn observer(mut self, observer: Arc<dyn SourceObserver>) -> Self {
        self.observer = Some(observer);
        self
    }

    /// Traces every source's publishing with `tracer`, as
    /// [`RelayBuilder::tracer`](crate::RelayBuilder::tracer) does for a
    /// relay of one source, in either delivery mode.
    #[cfg(feature = "opentelemetry")]
    pub fn tracer<T>(mut self, tracer: T) -> Self
    where
        T: opentelemetry::trace::Tracer + Send + Sync + 'static,
        T::Span: Send + Sync + 'static,
    {
        self.tracer = Some(Arc::new(crate::trace::PublishTracer::new(tracer)));
        self
    }

    /// Validates every entry's settings and starts one task per database
    /// (which starts one per source). Sources begin dormant: the first
    /// check starts the workers of those with work.
    pub async fn spawn(self) -> Result<SourcesHandle> {
        if self.defs.is_empty() {
            return Err(Error::invalid("sources", "no source given".to_owned()));
        }
        let mut names = std::collections::HashSet::new();
        for def in &self.defs {
            def.config
                .validate()
                .map_err(|e| Error::invalid("source", format!("{}: {e}", def.name)))?;
            if !names.insert(def.name.clone()) {
                return Err(Error::invalid(
                    "source",
                    format!(
                        "{:?} is named twice: give every source its own name",
                        def.name
                    ),
                ));
            }
        }
        let instance_id = self
            .settings
            .instance_id
            .clone()
            .unwrap_or_else(|| RelayConfig::default().resolved_instance_id());
        let registry = Arc::new(Registry::default());
        let (shutdown, stopping) = watch::channel(false);
        let mut by_database: BTreeMap<String, Vec<SourceDef>> = BTreeMap::new();
        for def in self.defs {
            by_database
                .entry(def.database.clone())
                .or_default()
                .push(def);
        }
        registry
            .databases
            .store(by_database.len(), Ordering::Release);
        let mut publishers: Vec<Arc<dyn Publisher>> = Vec::new();
        let mut tasks = Vec::new();
        for (key, defs) in by_database {
            for def in &defs {
                if !publishers.iter().any(|p| same(p, &def.publisher)) {
                    publishers.push(def.publisher.clone());
                }
            }
            tasks.push(tokio::spawn(database::run(database::Database {
                key,
                defs,
                settings: self.settings.clone(),
                instance_id: instance_id.clone(),
                registry: registry.clone(),
                observer: self.observer.clone(),
                stopping: stopping.clone(),
                #[cfg(feature = "opentelemetry")]
                tracer: self.tracer.clone(),
            })));
        }
        tracing::info!(instance = %instance_id, databases = tasks.len(), "relay of many sources started");
        Ok(SourcesHandle {
            instance_id,
            registry,
            shutdown,
            tasks,
            publishers,
        })
    }
}

fn same(a: &Arc<dyn Publisher>, b: &Arc<dyn Publisher>) -> bool {
    std::ptr::addr_eq(Arc::as_ptr(a), Arc::as_ptr(b))
}

/// Every source served now, by name.
#[derive(Default)]
pub(crate) struct Registry {
    sources: Mutex<BTreeMap<String, Arc<SourceShared>>>,
    /// Databases whose every entry has been resolved to its schemas at
    /// least once (each pattern matched once).
    found: AtomicUsize,
    /// Databases served.
    databases: AtomicUsize,
}

impl Registry {
    /// Database task: every entry of its database has been resolved.
    fn found_database(&self) {
        self.found.fetch_add(1, Ordering::Release);
    }

    fn found_all(&self) -> bool {
        self.found.load(Ordering::Acquire) >= self.databases.load(Ordering::Acquire)
    }

    fn insert(&self, source: Arc<SourceShared>) {
        self.sources
            .lock()
            .expect("registry lock")
            .insert(source.name.clone(), source);
    }

    fn remove(&self, name: &str) {
        self.sources.lock().expect("registry lock").remove(name);
    }

    /// The totals of every source served now.
    fn stats(&self) -> StatsSnapshot {
        let mut sum = StatsSnapshot::default();
        for s in self.all() {
            let one = s.stats.snapshot();
            sum.delivered += one.delivered;
            sum.retried += one.retried;
            sum.dead_lettered += one.dead_lettered;
            sum.outages += one.outages;
            sum.batches += one.batches;
            sum.fenced_out += one.fenced_out;
            sum.refused_messages += one.refused_messages;
        }
        sum
    }

    fn all(&self) -> Vec<Arc<SourceShared>> {
        self.sources
            .lock()
            .expect("registry lock")
            .values()
            .cloned()
            .collect()
    }
}

/// What a source is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SourceState {
    /// Its worker runs.
    Active,
    /// Nothing to do: waiting for a wake-up or the dormant check.
    Dormant,
}

/// One source, as [`SourcesHandle::statuses`] reports it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct SourceStatus {
    /// `ENTRY` or `ENTRY/SCHEMA`.
    pub name: String,
    /// The database key of its entry.
    pub database: String,
    /// Its schema.
    pub schema: String,
    /// Active or dormant.
    pub state: SourceState,
    /// The last problem seen and not yet cleared by a success: the database
    /// down, the tables missing, the broker down.
    pub problem: Option<String>,
    /// Partitions held now.
    pub held: usize,
    /// Running totals.
    pub stats: StatsSnapshot,
}

impl SourceStatus {
    /// No problem outstanding.
    pub fn healthy(&self) -> bool {
        self.problem.is_none()
    }
}

/// The statuses of a running relay of many sources; cheap to clone.
#[derive(Clone)]
pub struct SourcesView {
    registry: Arc<Registry>,
}

impl SourcesView {
    /// Every source served now, by name.
    pub fn statuses(&self) -> Vec<SourceStatus> {
        self.registry.all().iter().map(|s| s.status()).collect()
    }

    /// As [`SourcesHandle::found_all`].
    pub fn found_all(&self) -> bool {
        self.registry.found_all()
    }
}

/// The running relay of many sources.
pub struct SourcesHandle {
    instance_id: String,
    registry: Arc<Registry>,
    shutdown: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
    publishers: Vec<Arc<dyn Publisher>>,
}

impl std::fmt::Debug for SourcesHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SourcesHandle")
            .field("instance_id", &self.instance_id)
            .finish_non_exhaustive()
    }
}

impl SourcesHandle {
    /// This instance's id (the same in every source).
    pub fn instance_id(&self) -> &str {
        &self.instance_id
    }

    /// Every source served now, by name.
    pub fn statuses(&self) -> Vec<SourceStatus> {
        self.view().statuses()
    }

    /// A handle on the sources' statuses that outlives a borrow of this one
    /// (for readiness checks).
    pub fn view(&self) -> SourcesView {
        SourcesView {
            registry: self.registry.clone(),
        }
    }

    /// The totals of every source served now.
    pub fn stats(&self) -> StatsSnapshot {
        self.registry.stats()
    }

    /// Whether every entry has been resolved to its schemas at least once:
    /// every `schema` entry served and every pattern matched (a database
    /// down at the start keeps this false until it answers). Until then
    /// [`SourcesHandle::statuses`] may miss sources, so nothing pending
    /// among them says nothing yet.
    pub fn found_all(&self) -> bool {
        self.registry.found_all()
    }

    /// Whether every database's task has ended (only after shutdown).
    pub fn is_finished(&self) -> bool {
        self.tasks.iter().all(|t| t.is_finished())
    }

    /// Graceful stop of every source (as [`super::RelayHandle::shutdown`]),
    /// then the publishers are closed; past `deadline` what is left is
    /// aborted. Returns the totals.
    pub async fn shutdown_within(self, deadline: Duration) -> Result<StatsSnapshot> {
        let _ = self.shutdown.send(true);
        let mut tasks = self.tasks;
        let all = async {
            for t in &mut tasks {
                let _ = t.await;
            }
        };
        let finished = tokio::time::timeout(deadline, all).await.is_ok();
        if !finished {
            for t in &tasks {
                t.abort();
            }
        }
        let stats = self.registry.stats();
        for p in &self.publishers {
            p.close().await;
        }
        if finished {
            Ok(stats)
        } else {
            Err(Error::ShutdownTimeout(deadline))
        }
    }
}

/// The database `pool` reaches, however its URL spells it: the cluster's
/// system identifier and the database's name (`queries::DATABASE_IDENTITY`).
/// Two entries whose pools answer alike reach one database: give them one
/// [`SourceDef::database`] key, so a schema is served once. `None` when
/// the server refuses the question (a role not allowed to read
/// `pg_control_system()`).
pub async fn database_identity(pool: &PgPool) -> Option<String> {
    sqlx::query_scalar(crate::queries::DATABASE_IDENTITY)
        .fetch_one(pool)
        .await
        .ok()
}
