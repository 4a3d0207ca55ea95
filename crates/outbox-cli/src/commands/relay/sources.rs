//! `outbox relay` over many sources (`[[source]]` in the config file): one
//! pool and one wake-up listener per database, a worker per source while it
//! has work, `/readyz` per source under the `[sources] ready` policy, every
//! metric labelled with its source.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use outbox::sources::{
    SchemaSelector, SourceDef, SourceObserver, Sources, SourcesHandle, SourcesSettings,
};
use outbox::{Publisher, RelayConfig, RelayObserver, Schema, Status};
use sqlx::PgPool;

use super::wiring::{Around, DrainCheck, Started};
use crate::config::{Config, PublisherConfig};
use crate::ctx::Ctx;
use crate::daemon::http::{Ready, SourcesReadiness};
use crate::daemon::metrics::{self, Metrics};
use crate::db;
use outbox_publishers::registry as publisher;

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

/// Connected, not yet started.
pub(super) struct Prepared {
    plan: SourcesPlan,
    /// Each database's pool, by the URL of the entry that opened it.
    pools: BTreeMap<String, PgPool>,
    /// Each entry's pool's URL, by entry name.
    url_of: BTreeMap<String, String>,
    /// One per distinct publisher setting, with the key that tells them
    /// apart.
    publishers: Vec<(String, Arc<dyn Publisher>)>,
    /// Each entry's publisher, by entry name.
    publisher_of: BTreeMap<String, Arc<dyn Publisher>>,
}

/// Every database's pool, then every entry's publisher (entries with the
/// same publisher settings share one).
pub(super) async fn connect(plan: SourcesPlan) -> Result<Prepared> {
    let (pools, url_of) = connect_databases(&plan).await?;
    let mut publishers: Vec<(String, Arc<dyn Publisher>)> = Vec::new();
    let mut publisher_of = BTreeMap::new();
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
        publisher_of.insert(s.name.clone(), publisher);
    }
    Ok(Prepared {
        plan,
        pools,
        url_of,
        publishers,
        publisher_of,
    })
}

impl Prepared {
    /// Starts every entry's sources.
    pub(super) async fn spawn(self, ctx: &Ctx, around: Around<'_>) -> Result<Started<Many>> {
        let c = &ctx.loaded.config;
        let mut builder = Sources::builder()
            .settings(self.plan.settings.clone())
            .observer(Arc::new(Labelled(around.metrics.clone())));
        #[cfg(feature = "opentelemetry")]
        if let Some(export) = around.export {
            builder = builder.tracer(export.tracer());
        }
        let mut kept = BTreeMap::new();
        for s in &self.plan.sources {
            let url = &self.url_of[&s.name];
            let pool = self.pools[url].clone();
            if s.relay.retention == outbox::Retention::Keep {
                kept.insert(s.name.clone(), pool.clone());
            }
            builder = builder.source(SourceDef {
                name: s.name.clone(),
                database: db::redact_text(url),
                pool,
                selector: s.selector.clone(),
                config: s.relay.clone(),
                publisher: self.publisher_of[&s.name].clone(),
                // Read only for a schema in the WAL mode: its slot is read
                // over a replication connection to the same server.
                replication: outbox::ReplicationTarget::from_url(&s.database_url).ok(),
            });
        }
        let relay = builder.spawn().await?;
        let publishers: Vec<_> = self.publishers.into_iter().map(|(_, p)| p).collect();
        let info = metrics::RelayInfo {
            version: env!("CARGO_PKG_VERSION").to_owned(),
            instance_id: relay.instance_id().to_owned(),
            schema: String::new(),
            publisher: publishers
                .iter()
                .map(|p| p.name().to_owned())
                .collect::<Vec<_>>()
                .join(","),
        };
        let readiness = Ready::Sources(SourcesReadiness {
            sources: relay.view(),
            publishers,
            state: around.state.clone(),
            all: self.plan.ready_all,
            timeout: Duration::from_millis(c.http.check_timeout_ms),
        });
        Ok(Started {
            running: Many {
                relay,
                entries: self.plan.sources.len(),
                pools: self.pools,
                kept,
            },
            readiness: Some(readiness),
            background: Vec::new(),
            info,
        })
    }
}

/// The running relay of many sources.
pub(super) struct Many {
    pub(super) relay: SourcesHandle,
    entries: usize,
    /// Each database's pool, by the URL of the entry that opened it.
    pools: BTreeMap<String, PgPool>,
    /// The pool of every entry whose sources keep processed rows
    /// (retention mode), by entry name.
    kept: BTreeMap<String, PgPool>,
}

impl Many {
    pub(super) fn log_running(&self, drain: bool) {
        tracing::info!(
            instance = self.relay.instance_id(),
            entries = self.entries,
            databases = self.pools.len(),
            drain,
            "relay of many sources running"
        );
    }

    pub(super) fn drain_tick(&self) -> Duration {
        DRAIN_TICK
    }

    /// What the cleaner cleans before each of its runs: every schema served
    /// at that moment whose entry keeps processed rows, with its database's
    /// pool; `None` when no entry keeps them.
    ///
    /// One cleaner over the sources' statuses, not one per source in the
    /// library's source tasks: its runs go through the schemas one after
    /// the other, so however many tenants a pattern finds it takes one
    /// connection of a database's pool at a time (the pool its workers
    /// share), and a schema a pattern found or let go is in or out of the
    /// next run, with nothing to start or stop.
    pub(super) fn cleaned(&self) -> Option<impl Fn() -> Vec<(PgPool, Schema)> + Send + Sync> {
        if self.kept.is_empty() {
            return None;
        }
        let (view, kept) = (self.relay.view(), self.kept.clone());
        Some(move || {
            view.statuses()
                .into_iter()
                .filter_map(|s| {
                    // `ENTRY` or `ENTRY/SCHEMA`: entry names hold no `/`.
                    let entry = s.name.split('/').next()?;
                    let pool = kept.get(entry)?;
                    Some((pool.clone(), Schema::new(&s.schema).ok()?))
                })
                .collect()
        })
    }

    /// Events pending across every source served now.
    pub(super) async fn pending(&self) -> std::result::Result<i64, DrainCheck> {
        if !self.relay.found_all() {
            return Err(DrainCheck::NotYet);
        }
        let mut total = 0;
        for s in self.relay.statuses() {
            let Some(pool) = self
                .pools
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
                    return Err(DrainCheck::unmigrated(Some(&s.name), &s.schema))
                }
                Err(e) => return Err(e.into()),
            }
        }
        Ok(total)
    }
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
                crate::daemon::session_check::require_sessions(&pool).await?;
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
