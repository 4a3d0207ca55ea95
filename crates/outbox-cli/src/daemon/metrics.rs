//! Prometheus metrics of `outbox relay`, the one place they are named.
//!
//! Every family but `outbox_relay_info` is labelled by `source`, the name
//! of the source (a database and one schema) its series describe; the
//! single-source relay names its one source after its schema. A
//! [`SourceMetrics`] handle ([`Metrics::source`]) is that source's
//! [`outbox::RelayObserver`] (what each batch did) and the writer of the
//! gauges only its database knows (pending, oldest pending and claimable
//! ages, dead letters, the oldest snapshot's age; see [`database`]), set by
//! a refresher every few seconds so scrapes never query a database.
//! `outbox_database_up` is the verdict of the source's `/readyz` database
//! check (`DbProbe`), so the two always agree.
//!
//! Labels are few and bounded: `source` by the configured and discovered
//! sources (a source let go is forgotten, [`Metrics::forget_source`]),
//! `event_type` by [`MAX_EVENT_TYPES`] across all sources, no event ids;
//! `outbox_relay_info` carries this process's own identity once. One
//! registry holds one family per metric, so the exposition has one HELP
//! and TYPE per family however many sources there are.

mod database;
mod source;
#[cfg(test)]
mod tests;

pub use database::DbGauges;
pub use source::SourceMetrics;

use std::collections::{HashMap, HashSet};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

/// Distinct `event_type` label values kept, across all sources together;
/// later ones count as `other`.
const MAX_EVENT_TYPES: usize = 100;

/// Seconds, for batch durations.
const BATCH_BUCKETS: [f64; 14] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

/// Seconds, for commit-to-acknowledgement latency (outages make it long).
const LATENCY_BUCKETS: [f64; 17] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0,
    3600.0, 21600.0,
];

/// `outbox_retries`' reasons: `retry`, `unavailable`, `database` exist
/// from the start, `other` once an outage of a newer kind is seen.
const RETRY_REASONS: [&str; 4] = ["retry", "unavailable", "database", "other"];

/// `outbox_messages_refused`' rules (the WAL reader's refusals), and
/// `other` for a rule newer than this list.
const REFUSAL_RULES: [&str; 7] = [
    "utf8",
    "format",
    "length",
    "nul",
    "payload",
    "duplicate_id",
    "other",
];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SourceRule {
    source: String,
    rule: &'static str,
}

/// The label of every per-source series.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SourceLabel {
    source: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SourceEventType {
    source: String,
    event_type: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SourceReason {
    source: String,
    reason: &'static str,
}

/// Who this relay is: `outbox_relay_info`'s labels.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RelayInfo {
    /// The program's version.
    pub version: String,
    /// The relay's `instance_id`.
    pub instance_id: String,
    /// The outbox schema it relays.
    pub schema: String,
    /// The publisher's name (`webhook`, `kafka`, …).
    pub publisher: String,
}

type Histograms = Family<SourceLabel, Histogram, fn() -> Histogram>;
type Seconds = Family<SourceLabel, Gauge<f64, AtomicU64>>;

fn batch_histogram() -> Histogram {
    Histogram::new(BATCH_BUCKETS)
}

fn latency_histogram() -> Histogram {
    Histogram::new(LATENCY_BUCKETS)
}

/// Every per-source family: registered once, shared by every source's
/// handle.
#[derive(Debug)]
struct Families {
    published: Family<SourceLabel, Counter>,
    failed: Family<SourceEventType, Counter>,
    dead_lettered: Family<SourceLabel, Counter>,
    retries: Family<SourceReason, Counter>,
    batches: Family<SourceLabel, Counter>,
    batch_duration: Histograms,
    commit_to_ack: Histograms,
    pending: Family<SourceLabel, Gauge>,
    retrying: Family<SourceLabel, Gauge>,
    oldest_pending_age: Seconds,
    oldest_claimable_age: Seconds,
    oldest_xmin_age: Seconds,
    dead_letters: Family<SourceLabel, Gauge>,
    partitions_owned: Family<SourceLabel, Gauge>,
    partitions_total: Family<SourceLabel, Gauge>,
    database_up: Family<SourceLabel, Gauge>,
    publisher_up: Family<SourceLabel, Gauge>,
    paused: Family<SourceLabel, Gauge>,
    slot_lag_bytes: Family<SourceLabel, Gauge>,
    slot_retained_bytes: Family<SourceLabel, Gauge>,
    slot_active: Family<SourceLabel, Gauge>,
    refused: Family<SourceRule, Counter>,
    /// The `event_type` values given a series of their own, by any source.
    event_types: Mutex<HashSet<String>>,
}

impl Families {
    /// `event_type` as a label value: itself while fewer than
    /// [`MAX_EVENT_TYPES`] types are known across all sources, else
    /// `other`.
    fn event_type_label(&self, event_type: &str) -> String {
        let mut seen = self.event_types.lock().unwrap_or_else(|e| e.into_inner());
        if seen.contains(event_type) {
            event_type.to_owned()
        } else if seen.len() < MAX_EVENT_TYPES {
            seen.insert(event_type.to_owned());
            event_type.to_owned()
        } else {
            "other".to_owned()
        }
    }

    /// Removes every series labelled `source`, given the event types its
    /// failures were counted under.
    fn remove(&self, source: &str, event_types: HashSet<String>) {
        let label = SourceLabel {
            source: source.to_owned(),
        };
        for family in [&self.published, &self.dead_lettered, &self.batches] {
            family.remove(&label);
        }
        for family in [
            &self.pending,
            &self.retrying,
            &self.dead_letters,
            &self.partitions_owned,
            &self.partitions_total,
            &self.database_up,
            &self.publisher_up,
            &self.paused,
            &self.slot_lag_bytes,
            &self.slot_retained_bytes,
            &self.slot_active,
        ] {
            family.remove(&label);
        }
        for family in [
            &self.oldest_pending_age,
            &self.oldest_claimable_age,
            &self.oldest_xmin_age,
        ] {
            family.remove(&label);
        }
        self.batch_duration.remove(&label);
        self.commit_to_ack.remove(&label);
        for reason in RETRY_REASONS {
            self.retries.remove(&SourceReason {
                source: source.to_owned(),
                reason,
            });
        }
        for rule in REFUSAL_RULES {
            self.refused.remove(&SourceRule {
                source: source.to_owned(),
                rule,
            });
        }
        for event_type in event_types {
            self.failed.remove(&SourceEventType {
                source: source.to_owned(),
                event_type,
            });
        }
    }
}

/// The relay's metrics and their registry.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    families: Arc<Families>,
    relay_info: Family<RelayInfo, Gauge>,
    /// Each source's handle, made at its first [`Metrics::source`].
    sources: Mutex<HashMap<String, SourceMetrics>>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Registers every family, with no series until a source is named.
    pub fn new() -> Self {
        let mut registry = Registry::default();
        let families = Families {
            published: Family::default(),
            failed: Family::default(),
            dead_lettered: Family::default(),
            retries: Family::default(),
            batches: Family::default(),
            batch_duration: Family::new_with_constructor(batch_histogram),
            commit_to_ack: Family::new_with_constructor(latency_histogram),
            pending: Family::default(),
            retrying: Family::default(),
            oldest_pending_age: Family::default(),
            oldest_claimable_age: Family::default(),
            oldest_xmin_age: Family::default(),
            dead_letters: Family::default(),
            partitions_owned: Family::default(),
            partitions_total: Family::default(),
            database_up: Family::default(),
            publisher_up: Family::default(),
            paused: Family::default(),
            slot_lag_bytes: Family::default(),
            slot_retained_bytes: Family::default(),
            slot_active: Family::default(),
            refused: Family::default(),
            event_types: Mutex::new(HashSet::new()),
        };
        let relay_info = Family::<RelayInfo, Gauge>::default();
        // Every metric: field, name, help. The one place metrics are named.
        macro_rules! register {
            ($(($field:ident, $name:literal, $help:literal),)*) => {
                $(registry.register($name, $help, families.$field.clone());)*
            };
        }
        register!(
            (published, "outbox_events_published", "Events acknowledged by the broker and marked done"),
            (failed, "outbox_events_failed", "Failed delivery attempts (retried or dead-lettered), by event type"),
            (dead_lettered, "outbox_events_dead_lettered", "Events dead-lettered by this relay"),
            (retries, "outbox_retries", "Retries: reason=retry per event scheduled for another attempt; unavailable / database per round abandoned because the broker / PostgreSQL was down"),
            (batches, "outbox_batches", "Batches claimed and processed"),
            (batch_duration, "outbox_batch_duration_seconds", "Time from claiming a batch to acknowledging it"),
            (commit_to_ack, "outbox_commit_to_ack_seconds", "Time from an event's created_at (its transaction's start) to the broker's acknowledgement"),
            (pending, "outbox_events_pending", "Events not yet delivered, including those waiting for a retry (from the database)"),
            (retrying, "outbox_events_retrying", "Pending events that failed at least once (from the database)"),
            (oldest_pending_age, "outbox_oldest_pending_age_seconds", "Age of the oldest pending event; 0 when none (from the database)"),
            (oldest_claimable_age, "outbox_oldest_claimable_age_seconds", "How long the oldest event the relay could claim now has waited, since it became claimable; events waiting out a backoff (and those queued behind them) are left out; 0 when none (from the database)"),
            (oldest_xmin_age, "outbox_oldest_xmin_age_seconds", "Age of the oldest transaction holding back vacuum (a snapshot's xmin) in the source's database; 0 when none (from the database)"),
            (dead_letters, "outbox_dead_letters", "Dead-lettered events in the table (from the database)"),
            (partitions_owned, "outbox_partitions_owned", "Partitions this instance holds a lease on"),
            (partitions_total, "outbox_partitions", "Partitions of the outbox (from the lease round)"),
            (database_up, "outbox_database_up", "1 when the last database check (the one /readyz shows) could query the outbox tables, else 0"),
            (publisher_up, "outbox_publisher_up", "0 while the broker is down (the last publish found it unavailable), else 1"),
            (paused, "outbox_paused", "Pauses in force (outbox_pauses: the whole outbox, or one aggregate type each); 0 when delivery runs for everything (from the database)"),
            (slot_lag_bytes, "outbox_slot_lag_bytes", "WAL mode: bytes of WAL from the slot's confirmed position to the server's, what the relay has still to read and confirm; 0 in the table mode (from the database)"),
            (slot_retained_bytes, "outbox_slot_retained_bytes", "WAL mode: bytes of WAL the slot keeps the server from removing; 0 in the table mode (from the database)"),
            (slot_active, "outbox_slot_active", "WAL mode: 1 while a relay reads the slot, 0 while none does (or in the table mode) (from the database)"),
            (refused, "outbox_messages_refused", "WAL mode: messages with the outbox's prefix refused and never published because no row could hold them (rule: utf8, format, length, nul, payload, duplicate_id); each also logged with the fix"),
        );
        registry.register(
            "outbox_relay_info",
            "1, labelled with this relay's version, instance id, schema and publisher",
            relay_info.clone(),
        );
        Metrics {
            registry,
            families: Arc::new(families),
            relay_info,
            sources: Mutex::new(HashMap::new()),
        }
    }

    /// The exposition, OpenMetrics text format.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing to a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }

    /// The handle of source `name`: its series exist from this call on
    /// (counters at 0, `outbox_publisher_up` 1, `outbox_database_up` 0
    /// until its first check). Every call with the same name, until it is
    /// forgotten, gives a handle to the same series.
    pub fn source(&self, name: &str) -> SourceMetrics {
        let mut sources = self.sources.lock().unwrap_or_else(|e| e.into_inner());
        sources
            .entry(name.to_owned())
            .or_insert_with(|| SourceMetrics::new(self.families.clone(), name))
            .clone()
    }

    /// Removes every series of source `name`, so it is gone from the next
    /// scrape (a schema dropped, a source taken out of the config). Its
    /// handles still in use count into series no longer exported; a later
    /// [`Metrics::source`] of the same name starts from zero.
    // Called by the relay of many sources; the single-source relay has
    // nothing to forget and reads its one source's handle.
    #[cfg_attr(not(test), allow(dead_code))]
    pub fn forget_source(&self, name: &str) {
        // Under the lock, so a source of the same name named meanwhile
        // gets series of its own, not these about to be removed.
        let mut sources = self.sources.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(source) = sources.remove(name) {
            source.forget();
        }
    }

    /// The partitions source `name` held and saw, as of its last lease
    /// round; `None` for a source never named (or forgotten).
    // Called by the relay of many sources; the single-source relay has
    // nothing to forget and reads its one source's handle.
    #[cfg_attr(not(test), allow(dead_code))]
    pub fn partitions_of(&self, name: &str) -> Option<(i64, i64)> {
        let sources = self.sources.lock().unwrap_or_else(|e| e.into_inner());
        sources.get(name).map(SourceMetrics::partitions)
    }

    /// Sets `outbox_relay_info`, once, when the relay starts.
    pub fn set_relay_info(&self, info: RelayInfo) {
        self.relay_info.get_or_create(&info).set(1);
    }
}
