//! One database's sources: its wake-up listener (one connection, every
//! schema's channel), the dormant check and the announcements' renewal (one
//! statement each for all its dormant schemas), the patterns matched again,
//! and one task per source.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use sqlx::postgres::PgListener;
use sqlx::PgPool;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tracing::Instrument;

use super::source::{supervise, SourceCtx, SourceShared, UNCOUNTED};
use super::{
    sql, Registry, SchemaSelector, SourceDef, SourceObserver, SourceState, SourcesSettings,
};
use crate::queries as q;
use crate::schema::Schema;

/// The wait before the listener connects again.
const RECONNECT_DELAY: Duration = Duration::from_millis(500);

/// What one database's task is given.
pub(super) struct Database {
    pub key: String,
    pub defs: Vec<SourceDef>,
    pub settings: SourcesSettings,
    pub instance_id: String,
    pub registry: Arc<Registry>,
    pub observer: Option<Arc<dyn SourceObserver>>,
    pub stopping: watch::Receiver<bool>,
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
enum Heard {
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

    /// Matches every pattern again; starts serving the new schemas and
    /// returns them. Schemas no longer matched are let go by
    /// [`State::let_go_unmatched`].
    async fn rescan(&mut self) -> Vec<Arc<SourceShared>> {
        let mut added = Vec::new();
        let mut seen: Vec<(usize, Vec<Schema>)> = Vec::new();
        for (i, def) in self.db.defs.iter().enumerate() {
            let SchemaSelector::Pattern(pattern) = &def.selector else {
                continue;
            };
            let found = async {
                let mut conn = self
                    .pool
                    .acquire()
                    .await
                    .map_err(crate::Error::db("connecting"))?;
                crate::discover::schemas_matching(&mut conn, pattern).await
            }
            .await;
            match found {
                Ok(schemas) => seen.push((i, schemas)),
                Err(e) => {
                    tracing::warn!(source = %def.name, pattern = %pattern, error = %e.with_causes(), "could not match the schemas; serving the ones found before");
                }
            }
        }
        for (i, schemas) in &seen {
            for schema in schemas {
                let name = format!("{}/{}", self.db.defs[*i].name, schema.name());
                if !self.served.contains_key(schema.name()) {
                    if let Some(shared) = self.add(*i, schema.clone(), name) {
                        added.push(shared);
                    }
                }
            }
        }
        self.matched = seen;
        added
    }

    /// Lets go of the schemas a pattern no longer matches (dropped, or
    /// renamed): their workers stop, the observer forgets them. Returns
    /// whether any went.
    fn let_go_unmatched(&mut self) -> bool {
        let gone: Vec<String> = self
            .served
            .iter()
            .filter(|(schema, served)| {
                self.matched.iter().any(|(def, schemas)| {
                    *def == served.def && !schemas.iter().any(|s| s.name() == schema.as_str())
                })
            })
            .map(|(schema, _)| schema.clone())
            .collect();
        for schema in &gone {
            let Some(served) = self.served.remove(schema) else {
                continue;
            };
            let name = served.shared.name.clone();
            tracing::info!(source = %name, schema = %schema, "letting the source go: its schema is gone or no longer matches");
            let _ = served.stop.send(true);
            let registry = self.db.registry.clone();
            let observer = self.db.observer.clone();
            tokio::spawn(async move {
                let _ = served.task.await;
                registry.remove(&name);
                if let Some(o) = observer {
                    o.source_removed(&name);
                }
            });
        }
        !gone.is_empty()
    }

    /// Announces `sources` as idle whatever stands: they begin dormant, and
    /// producers' commits are to wake them.
    async fn announce_new(&mut self, sources: &[Arc<SourceShared>], lease_ms: u64) {
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
    async fn renew(&self, lease_ms: u64) {
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
    async fn check(&mut self) -> bool {
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
    async fn check_everything(&mut self) {
        let _ = self.check_counted().await;
        let dormant = self.dormant();
        for chunk in dormant.chunks(CHUNK) {
            self.check_full(chunk).await;
        }
    }

    /// The cheap check; returns whether a schema found by a pattern has
    /// lost its table.
    async fn check_counted(&self) -> bool {
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
    async fn check_full(&self, chunk: &[Arc<SourceShared>]) {
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

    fn dormant(&self) -> Vec<Arc<SourceShared>> {
        self.served
            .values()
            .filter(|s| s.shared.state() == SourceState::Dormant)
            .map(|s| s.shared.clone())
            .collect()
    }

    /// The listener for every served schema's channel and the schema
    /// changes' channel, on its own task (replaced when the schemas change).
    fn spawn_listener(&self, heard: mpsc::UnboundedSender<Heard>) -> JoinHandle<()> {
        let mut channels: Vec<String> = self
            .served
            .values()
            .map(|s| s.shared.schema.channel())
            .collect();
        channels.push(q::SCHEMAS_CHANGED_CHANNEL.to_owned());
        let pool = self.pool.clone();
        let key = self.db.key.clone();
        tokio::spawn(async move {
            loop {
                let mut listener = match PgListener::connect_with(&pool).await {
                    Ok(l) => l,
                    Err(e) => {
                        tracing::debug!(database = %key, error = %e, "wake-up listener cannot connect; the dormant check covers meanwhile");
                        tokio::time::sleep(RECONNECT_DELAY).await;
                        continue;
                    }
                };
                if let Err(e) = listener
                    .listen_all(channels.iter().map(String::as_str))
                    .await
                {
                    tracing::debug!(database = %key, error = %e, "LISTEN failed; the dormant check covers meanwhile");
                    tokio::time::sleep(RECONNECT_DELAY).await;
                    continue;
                }
                if heard.send(Heard::Connected).is_err() {
                    return;
                }
                loop {
                    match listener.recv().await {
                        Ok(n) => {
                            let sent = heard.send(Heard::Notification {
                                channel: n.channel().to_owned(),
                                payload: n.payload().to_owned(),
                            });
                            if sent.is_err() {
                                return;
                            }
                        }
                        Err(e) => {
                            tracing::debug!(database = %key, error = %e, "wake-up listener lost its connection");
                            tokio::time::sleep(RECONNECT_DELAY).await;
                            break;
                        }
                    }
                }
            }
        })
    }
}

/// The full dormant check covers every dormant source once per this many
/// rounds of `check_interval`.
const FULL_CHECK_ROUNDS: usize = 30;

/// Schemas per statement of the check and the announcements: bounds the
/// statement's size (and its planning) however many schemas match.
const CHUNK: usize = 250;
