//! One database's sources: one task per source, and the loop that serves
//! them with the wake-up listener (`listener`: one connection, every
//! schema's channel), the dormant sources' check and announcements
//! (`dormant`: one statement each for all of them) and the patterns matched
//! again (`membership`).

mod dormant;
mod listener;
mod membership;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use sqlx::PgPool;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tracing::Instrument;

use super::shared::{SourceCtx, SourceShared};
use super::source::supervise;
use super::{Registry, SchemaSelector, SourceDef, SourceObserver, SourceState, SourcesSettings};
use crate::queries as q;
use crate::schema::Schema;

/// What one database's task is given.
pub(super) struct Database {
    pub key: String,
    pub defs: Vec<SourceDef>,
    pub settings: SourcesSettings,
    pub instance_id: String,
    pub registry: Arc<Registry>,
    pub observer: Option<Arc<dyn SourceObserver>>,
    pub stopping: watch::Receiver<bool>,
    #[cfg(feature = "opentelemetry")]
    pub tracer: Option<Arc<crate::trace::PublishTracer>>,
}

/// A source served now.
struct Served {
    shared: Arc<SourceShared>,
    /// The entry it comes from (index into `defs`).
    def: usize,
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
}

/// What the listener heard.
pub(super) enum Heard {
    /// (Re)connected and listening: anything sent meanwhile was missed.
    Connected,
    Notification {
        channel: String,
        payload: String,
    },
}

struct State {
    db: Database,
    pool: PgPool,
    /// By schema name: a schema is served once, by the first entry naming it.
    served: BTreeMap<String, Served>,
    /// The last match of each pattern entry that could be matched.
    matched: Vec<(usize, Vec<Schema>)>,
    /// Where the next full check's slice of the dormant sources begins.
    full_check_next: usize,
    /// Every entry resolved once (told to the registry then).
    found: bool,
}

/// Serves the database's sources until the relay stops.
pub(super) async fn run(db: Database) {
    let pool = db.defs[0].pool.clone();
    let mut stopping = db.stopping.clone();
    let check_every = db.settings.check_interval;
    let rescan_every = db.settings.rescan_interval;
    let lease_ms = db
        .defs
        .iter()
        .map(|d| d.config.lease_ms)
        .min()
        .unwrap_or(10_000);
    let mut st = State {
        db,
        pool,
        served: BTreeMap::new(),
        matched: Vec::new(),
        full_check_next: 0,
        found: false,
    };
    for i in 0..st.db.defs.len() {
        if let SchemaSelector::Schema(schema) = &st.db.defs[i].selector {
            let (schema, name) = (schema.clone(), st.db.defs[i].name.clone());
            st.add(i, schema, name);
        }
    }
    st.rescan().await;
    let everything: Vec<Arc<SourceShared>> = st.served.values().map(|s| s.shared.clone()).collect();
    st.announce_new(&everything, lease_ms).await;

    let (heard_tx, mut heard) = mpsc::unbounded_channel();
    let mut listener = st.spawn_listener(heard_tx.clone());
    let mut check = tokio::time::interval(check_every);
    check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut renew = tokio::time::interval(Duration::from_millis(lease_ms / 3));
    renew.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    renew.tick().await;
    let mut rescan = tokio::time::interval(rescan_every);
    rescan.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    rescan.tick().await;
    let channels = |st: &State| -> HashMap<String, Arc<SourceShared>> {
        st.served
            .values()
            .map(|s| (s.shared.schema.channel(), s.shared.clone()))
            .collect()
    };
    let mut by_channel = channels(&st);
    loop {
        tokio::select! {
            _ = stopping.changed() => break,
            heard_now = heard.recv() => match heard_now {
                Some(Heard::Connected) => st.check_everything().await,
                Some(Heard::Notification { channel, payload }) => {
                    if channel == q::SCHEMAS_CHANGED_CHANNEL {
                        rescan.reset_immediately();
                    } else if let Some(src) = by_channel.get(&channel) {
                        if payload == q::REBALANCE_PAYLOAD {
                            if src.state() == SourceState::Active {
                                src.rebalance.notify_one();
                            }
                        } else if payload == q::PAUSES_PAYLOAD {
                            src.wakeup.pauses_changed();
                            src.wakeup.wake_local();
                        } else {
                            src.wakeup.wake_local();
                        }
                    }
                }
                None => break,
            },
            _ = check.tick() => {
                if st.check().await {
                    // A pattern's schema lost its table: let it go now.
                    rescan.reset_immediately();
                }
            }
            _ = renew.tick() => st.renew(lease_ms).await,
            _ = rescan.tick() => {
                let (added, removed) = (st.rescan().await, st.let_go_unmatched());
                if !added.is_empty() || removed {
                    by_channel = channels(&st);
                    listener.abort();
                    listener = st.spawn_listener(heard_tx.clone());
                    st.announce_new(&added, lease_ms).await;
                }
            }
        }
    }
    listener.abort();
    for served in st.served.values() {
        let _ = served.stop.send(true);
    }
    for (_, served) in std::mem::take(&mut st.served) {
        let _ = served.task.await;
    }
}

impl State {
    /// Starts serving `schema` as the source `name` of entry `def`, unless
    /// the schema is served already.
    fn add(&mut self, def: usize, schema: Schema, name: String) -> Option<Arc<SourceShared>> {
        if let Some(other) = self.served.get(schema.name()) {
            tracing::debug!(source = %name, served_as = %other.shared.name, "schema already served by another source entry");
            return None;
        }
        let d = &self.db.defs[def];
        let shared = Arc::new(SourceShared::new(
            name.clone(),
            self.db.key.clone(),
            schema.clone(),
        ));
        let observer = self
            .db
            .observer
            .as_ref()
            .and_then(|o| o.source_added(&name));
        let ctx = SourceCtx {
            pool: d.pool.clone(),
            config: d.config.clone(),
            publisher: d.publisher.clone(),
            observer,
            instance_id: self.db.instance_id.clone(),
            dormant_after: self.db.settings.dormant_after,
            replication: d.replication.clone(),
            #[cfg(feature = "opentelemetry")]
            tracer: self.db.tracer.clone(),
        };
        let (stop, stopped) = watch::channel(false);
        let span = tracing::info_span!("source", source = %name);
        let task = tokio::spawn(supervise(shared.clone(), ctx, stopped).instrument(span));
        self.db.registry.insert(shared.clone());
        tracing::info!(source = %name, schema = schema.name(), "serving source");
        self.served.insert(
            schema.name().to_owned(),
            Served {
                shared: shared.clone(),
                def,
                stop,
                task,
            },
        );
        Some(shared)
    }
}
