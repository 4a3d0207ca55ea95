//! `outbox relay` over many sources (`[[source]]` in the config file): one
//! pool and one wake-up listener per database, a worker per source while it
//! has work, `/readyz` per source under the `[sources] ready` policy, every
//! metric labelled with its source.

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use outbox::sources::{
    SchemaSelector, SourceDef, SourceObserver, Sources, SourcesHandle, SourcesSettings, SourcesView,
};
use outbox::{Publisher, RelayConfig, RelayObserver, Schema, Status};
use sqlx::PgPool;

use super::stop::{Signals, StopReason};
use super::RelayArgs;
use crate::config::{Config, PublisherConfig};
use crate::ctx::Ctx;
use crate::http::{self, Ready, RelayState, SourcesReadiness};
use crate::metrics::{self, Metrics};
use crate::progress::Progress;
use crate::{db, publisher};

/// How often `--drain` counts what is pending across the sources.
const DRAIN_TICK: Duration = Duration::from_secs(1);

/// One `[[source]]` entry, resolved.
pub struct SourcePlan {
    pub name: String,
    pub database_url: String,
    /// The database the URL reaches, however spelled
    /// ([`db::database_address`]).
    pub address: String,
    pub selector: SchemaSelector,
    pub relay: RelayConfig,
    pub publisher: PublisherConfig,
}

/// Everything the relay of many sources runs with.
pub struct SourcesPlan {
    pub sources: Vec<SourcePlan>,
    /// `/readyz` needs every source healthy (else: at least one).
    pub ready_all: bool,
    pub pool_size: u32,
    pub settings: SourcesSettings,
}

/// Prepared statements cached per connection of a database's shared pool
/// (sqlx's default). Every source has its own (its schema's names are in
/// them), so with many sources most wake-ups prepare theirs again; a
/// larger cache costs each PostgreSQL session memory for every schema's
/// plans, and measured no faster on a first wake-up.
const STATEMENT_CACHE: usize = 100;

/// How long a source's worker stays idle before it goes dormant.
const DORMANT_AFTER: Duration = Duration::from_secs(1);

impl SourcesPlan {
    /// The plan the configuration's `[sources]` and `[[source]]` give.
    pub fn from_config(c: &Config) -> Result<Self> {
        let entries = c
            .sources()
            .map_err(|r| anyhow::anyhow!("{}: {}", r.key, r.reason))?;
        let s = &c.sources_settings;
        Ok(SourcesPlan {
            sources: entries
                .into_iter()
                .map(|e| SourcePlan {
                    name: e.name,
                    database_url: e.database_url,
                    address: e.address,
                    selector: match e.schemas {
                        crate::config::SchemaSelector::One(schema) => {
                            SchemaSelector::Schema(schema)
                        }
                        crate::config::SchemaSelector::Pattern(p) => SchemaSelector::Pattern(p),
                    },
                    relay: e.relay,
                    publisher: e.publisher,
                })
                .collect(),
            ready_all: s.ready == crate::config::Readiness::All,
            pool_size: s.pool_size,
            settings: SourcesSettings {
                check_interval: Duration::from_millis(s.check_ms),
                rescan_interval: Duration::from_secs(s.rescan_secs),
                dormant_after: DORMANT_AFTER,
                instance_id: c.relay.instance_id.clone(),
            },
        })
    }
}

/// Labels each source's metrics with its name, and forgets a source's
/// series when it goes.
struct Labelled(Arc<Metrics>);

impl SourceObserver for Labelled {
    fn source_added(&self, name: &str) -> Option<Arc<dyn RelayObserver>> {
        Some(Arc::new(self.0.source(name)))
    }

    fn source_removed(&self, name: &str) {
        self.0.forget_source(name);
    }
}

pub async fn run(ctx: &Ctx, args: &RelayArgs, plan: SourcesPlan) -> Result<ExitCode> {
    let loaded = &ctx.loaded;
    let c = &loaded.config;
    if args.console {
        bail!("--console serves one source's tables: with [[source]] entries, run `outbox console --database-url URL --schema SCHEMA` for the source to look at, beside the relay");
    }
    let mut signals = Signals::install(args.exit_with_parent)?;
    let listener = super::http_listener(loaded).await?;
    let metrics = Arc::new(Metrics::new());
    let (pools, url_of) = connect_databases(&plan).await?;
    // Entries with the same publisher settings share one publisher.
    let mut publishers: Vec<(String, Arc<dyn Publisher>)> = Vec::new();
    let export = crate::telemetry::Export::start(&c.tracing)?;
    let mut builder = Sources::builder()
        .settings(plan.settings.clone())
        .observer(Arc::new(Labelled(metrics.clone())));
    #[cfg(feature = "opentelemetry")]
    if let Some(export) = &export {
        builder = builder.tracer(export.tracer());
    }
    let mut names = Vec::new();
    for s in &plan.sources {
        let schema_for_envelope = match &s.selector {
            SchemaSelector::Schema(schema) => schema.name().to_owned(),
            SchemaSelector::Pattern(_) => s.name.clone(),
        };
        let key = format!(
            "{}\u{0}{}",
            serde_json::to_string(&s.publisher)?,
            schema_for_envelope_if_used(&s.publisher, &schema_for_envelope)
        );
        let publisher = match publishers.iter().find(|(k, _)| *k == key) {
            Some((_, p)) => p.clone(),
            None => {
                let envelope = envelope(&s.publisher, &schema_for_envelope)?;
                let p = publisher::from_config(&s.publisher.spec, &s.publisher.tables, envelope)
                    .with_context(|| format!("source {}: publisher", s.name))?;
                publishers.push((key, p.clone()));
                p
            }
        };
        names.push(s.name.clone());
        let url = &url_of[&s.name];
        builder = builder.source(SourceDef {
            name: s.name.clone(),
            database: db::redact_text(url),
            pool: pools[url].clone(),
            selector: s.selector.clone(),
            config: s.relay.clone(),
            publisher,
            // Read only for a schema in the WAL mode: its slot is read over
            // a replication connection to the same server.
            replication: outbox::ReplicationTarget::from_url(&s.database_url).ok(),
        });
    }
    let relay = builder.spawn().await?;
    metrics.set_relay_info(metrics::RelayInfo {
        version: env!("CARGO_PKG_VERSION").to_owned(),
        instance_id: relay.instance_id().to_owned(),
        schema: String::new(),
        publisher: publishers
            .iter()
            .map(|(_, p)| p.name().to_owned())
            .collect::<Vec<_>>()
            .join(","),
    });
    let state = Arc::new(RelayState::default());
    state.running.store(true, Ordering::Relaxed);
    let mut background = Vec::new();
    if let Some(listener) = listener {
        let addr = crate::listen::local_addr(&listener);
        let app = http::App {
            metrics: metrics.clone(),
            readiness: Ready::Sources(SourcesReadiness {
                sources: relay.view(),
                publishers: publishers.iter().map(|(_, p)| p.clone()).collect(),
                state: state.clone(),
                all: plan.ready_all,
                timeout: Duration::from_millis(c.http.check_timeout_ms),
            }),
            instance: relay.instance_id().to_owned(),
            started: Instant::now(),
            console: None,
        };
        background.push(http::serve(listener, Arc::new(app)));
        if let Some(addr) = addr {
            tracing::info!(%addr, "serving /metrics, /healthz and /readyz");
        }
    }
    tracing::info!(
        instance = relay.instance_id(),
        entries = names.len(),
        databases = pools.len(),
        drain = c.drain,
        "relay of many sources running"
    );
    let watched = watch(&relay, &pools, c.drain, &mut signals).await;
    let reason = match &watched {
        Ok(reason) => reason.to_string(),
        Err(e) => e.to_string(),
    };
    state.stopping.store(true, Ordering::Relaxed);
    let deadline = Duration::from_secs(c.shutdown_timeout_secs);
    tracing::info!(%reason, timeout_secs = c.shutdown_timeout_secs, "relay stopping: finishing in-flight batches and releasing partitions");
    // As a relay of one source: past the deadline and its grace, the
    // process ends whatever is still running.
    super::exit_after(deadline + super::HARD_EXIT_GRACE, c.shutdown_timeout_secs);
    let result = tokio::select! {
        r = relay.shutdown_within(deadline) => r,
        again = signals.next() => {
            eprintln!("error: {again} during shutdown: stopped at once; in-flight batches will be delivered again");
            std::process::exit(1);
        }
    };
    for task in &background {
        task.abort();
    }
    if let Some(export) = export {
        export.shutdown().await;
    }
    let stats = match result {
        Ok(stats) => stats,
        Err(outbox::Error::ShutdownTimeout(_)) => {
            eprintln!(
                "error: the relay did not stop within shutdown_timeout_secs = {}; exiting without acknowledging in-flight batches (they will be delivered again)",
                c.shutdown_timeout_secs
            );
            std::process::exit(1);
        }
        Err(e) => return Err(e).context("the relay failed while stopping"),
    };
    tracing::info!(%reason, delivered = stats.delivered, retried = stats.retried, dead_lettered = stats.dead_lettered, "relay stopped");
    watched?;
    if c.drain {
        eprintln!(
            "relay: {reason}; delivered {} events, {} retried, {} dead-lettered",
            stats.delivered, stats.retried, stats.dead_lettered
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// One pool per database, shared by its sources (the listener included),
/// and the URL of each entry's pool. Entries whose URLs reach one database
/// (the server's [`outbox::sources::database_identity`], else
/// [`db::database_address`]) share the pool of the first, so a schema is
/// served once; two `schema` entries naming one schema there are refused,
/// naming both.
async fn connect_databases(
    plan: &SourcesPlan,
) -> Result<(BTreeMap<String, PgPool>, BTreeMap<String, String>)> {
    let mut pools: BTreeMap<String, PgPool> = BTreeMap::new();
    // Database identity -> the URL of its pool.
    let mut first_url: BTreeMap<String, String> = BTreeMap::new();
    let mut identity_of: BTreeMap<String, String> = BTreeMap::new();
    let mut url_of: BTreeMap<String, String> = BTreeMap::new();
    // (identity, schema) -> the entry serving it.
    let mut served: BTreeMap<(String, String), &str> = BTreeMap::new();
    for s in &plan.sources {
        let identity = match identity_of.get(&s.database_url) {
            Some(identity) => identity.clone(),
            None => {
                tracing::debug!(database = %db::redact_text(&s.database_url), "connecting");
                let pool = db::connect_shared(&s.database_url, plan.pool_size, STATEMENT_CACHE)
                    .await
                    .with_context(|| format!("source {}", s.name))?;
                crate::session_check::require_sessions(&pool).await?;
                let identity = outbox::sources::database_identity(&pool)
                    .await
                    .unwrap_or_else(|| s.address.clone());
                if !first_url.contains_key(&identity) {
                    first_url.insert(identity.clone(), s.database_url.clone());
                    pools.insert(s.database_url.clone(), pool);
                }
                identity_of.insert(s.database_url.clone(), identity.clone());
                identity
            }
        };
        if let SchemaSelector::Schema(schema) = &s.selector {
            let key = (identity.clone(), schema.name().to_owned());
            if let Some(other) = served.insert(key, &s.name) {
                bail!(
                    "sources {other:?} and {:?} both serve schema {} of one database (their URLs differ, the server is the same): one schema is one source, or every event is delivered twice; remove one of the two entries",
                    s.name,
                    schema.name()
                );
            }
        }
        url_of.insert(s.name.clone(), first_url[&identity].clone());
    }
    Ok((pools, url_of))
}

/// The schema name an envelope's `{schema}` takes, only where the CloudEvents
/// source uses it (so entries that do not share one publisher).
fn schema_for_envelope_if_used<'a>(p: &PublisherConfig, schema: &'a str) -> &'a str {
    if p.cloudevents_source.contains("{schema}") && p.format.starts_with("cloudevents") {
        schema
    } else {
        ""
    }
}

fn envelope(p: &PublisherConfig, schema: &str) -> Result<outbox_publishers::Envelope> {
    let format: outbox_publishers::Format =
        p.format.parse().map_err(|e: String| anyhow::anyhow!(e))?;
    let source = outbox_publishers::cloudevents::source_for(&p.cloudevents_source, schema);
    Ok(outbox_publishers::Envelope::new(format, source))
}

/// Runs until a signal or, with `--drain`, until no source has anything
/// pending; an error when a drain cannot end (an entry's schema is not
/// migrated).
async fn watch(
    relay: &SourcesHandle,
    pools: &BTreeMap<String, PgPool>,
    drain: bool,
    signals: &mut Signals,
) -> Result<StopReason> {
    let mut progress = Progress::stderr("relay", drain);
    let mut tick = tokio::time::interval(DRAIN_TICK);
    let view = relay.view();
    let reason = loop {
        tokio::select! {
            sig = signals.next() => break Ok(sig),
            _ = tick.tick() => {
                if !drain {
                    continue;
                }
                match pending(&view, pools).await {
                    Ok(0) => break Ok(StopReason::Drained),
                    Ok(n) => progress.update(relay.stats().delivered, Some(n as u64)),
                    Err(DrainCheck::Unmigrated(e)) => break Err(e),
                    Err(DrainCheck::Failed(e)) => {
                        tracing::warn!(error = %crate::text::error_chain(&e), "drain check failed")
                    }
                }
            }
        }
    };
    progress.finish();
    reason
}

/// Why the events pending could not be counted.
enum DrainCheck {
    /// An entry's schema has no outbox tables: the drain would never end.
    Unmigrated(anyhow::Error),
    /// Anything else (a database restarting): counted again at the next tick.
    Failed(anyhow::Error),
}

impl From<outbox::Error> for DrainCheck {
    fn from(e: outbox::Error) -> Self {
        DrainCheck::Failed(e.into())
    }
}

impl From<sqlx::Error> for DrainCheck {
    fn from(e: sqlx::Error) -> Self {
        DrainCheck::Failed(e.into())
    }
}

/// Events pending across every source served now.
async fn pending(
    view: &SourcesView,
    pools: &BTreeMap<String, PgPool>,
) -> std::result::Result<i64, DrainCheck> {
    let mut total = 0;
    for s in view.statuses() {
        let Some(pool) = pools
            .iter()
            .find(|(url, _)| db::redact_text(url) == s.database)
            .map(|(_, p)| p)
        else {
            continue;
        };
        let mut conn = pool.acquire().await?;
        match Status::pending(&mut conn, &Schema::new(&s.schema)?).await {
            Ok(n) => total += n,
            Err(e) if e.is_missing_table() => {
                return Err(DrainCheck::Unmigrated(anyhow::anyhow!(
                    "source {}: schema {} has no outbox tables, so --drain cannot finish: run `outbox migrate --schema {}` on its database, or remove the entry",
                    s.name,
                    s.schema,
                    s.schema
                )))
            }
            Err(e) => return Err(e.into()),
        }
    }
    Ok(total)
}
