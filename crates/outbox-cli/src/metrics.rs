//! Longer than most files: every metric is named, set and unit-tested here,
//! the one place metrics are emitted.
//!
//! Prometheus metrics of `outbox relay`: a [`RelayObserver`] counts what
//! each batch did, and a refresher sets the gauges that only the database
//! knows (pending, oldest pending and claimable ages, dead letters, the
//! oldest snapshot's age; see [`database`]) every few seconds, so
//! scrapes never query the database. `outbox_database_up` is the verdict of
//! the `/readyz` database check (`DbProbe`), so the two always agree.
//! Labels are few and bounded: no event ids, and `outbox_relay_info`
//! carries this process's own identity once.

mod database;

pub use database::DbGauges;

use std::collections::HashSet;
use std::sync::atomic::AtomicU64;
use std::sync::Mutex;
use std::time::Duration;

use outbox::Status;
use outbox::{BatchReport, OutageKind, RelayObserver};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
/// Distinct `event_type` label values kept; later ones count as `other`.
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

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct EventType {
    event_type: String,
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

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Reason {
    reason: &'static str,
}

/// The relay's metrics and their registry.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    published: Counter,
    failed: Family<EventType, Counter>,
    dead_lettered: Counter,
    retries: Family<Reason, Counter>,
    batches: Counter,
    batch_duration: Histogram,
    commit_to_ack: Histogram,
    pending: Gauge,
    retrying: Gauge,
    oldest_pending_age: Gauge<f64, AtomicU64>,
    oldest_claimable_age: Gauge<f64, AtomicU64>,
    oldest_xmin_age: Gauge<f64, AtomicU64>,
    dead_letters: Gauge,
    partitions_owned: Gauge,
    partitions_total: Gauge,
    database_up: Gauge,
    publisher_up: Gauge,
    relay_info: Family<RelayInfo, Gauge>,
    paused: Gauge,
    event_types: Mutex<HashSet<String>>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Registers every metric at zero.
    pub fn new() -> Self {
        let mut registry = Registry::default();
        let m = Metrics {
            published: Counter::default(),
            failed: Family::default(),
            dead_lettered: Counter::default(),
            retries: Family::default(),
            batches: Counter::default(),
            batch_duration: Histogram::new(BATCH_BUCKETS),
            commit_to_ack: Histogram::new(LATENCY_BUCKETS),
            pending: Gauge::default(),
            retrying: Gauge::default(),
            oldest_pending_age: Gauge::default(),
            oldest_claimable_age: Gauge::default(),
            oldest_xmin_age: Gauge::default(),
            dead_letters: Gauge::default(),
            partitions_owned: Gauge::default(),
            partitions_total: Gauge::default(),
            database_up: Gauge::default(),
            publisher_up: Gauge::default(),
            relay_info: Family::default(),
            paused: Gauge::default(),
            event_types: Mutex::new(HashSet::new()),
            registry: Registry::default(),
        };
        // Every metric: field, name, help. The one place metrics are named.
        macro_rules! register {
            ($(($field:ident, $name:literal, $help:literal),)*) => {
                $(registry.register($name, $help, m.$field.clone());)*
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
            (oldest_xmin_age, "outbox_oldest_xmin_age_seconds", "Age of the oldest transaction holding back vacuum (a snapshot's xmin) in the outbox's database; 0 when none (from the database)"),
            (dead_letters, "outbox_dead_letters", "Dead-lettered events in the table (from the database)"),
            (partitions_owned, "outbox_partitions_owned", "Partitions this instance holds a lease on"),
            (partitions_total, "outbox_partitions", "Partitions of the outbox (from the lease round)"),
            (database_up, "outbox_database_up", "1 when the last database check (the one /readyz shows) could query the outbox tables, else 0"),
            (publisher_up, "outbox_publisher_up", "0 while the broker is down (the last publish found it unavailable), else 1"),
            (relay_info, "outbox_relay_info", "1, labelled with this relay's version, instance id, schema and publisher"),
            (paused, "outbox_paused", "Pauses in force (outbox_pauses: the whole outbox, or one aggregate type each); 0 when delivery runs for everything (from the database)"),
        );
        m.publisher_up.set(1);
        for reason in ["retry", "unavailable", "database"] {
            let _ = m.retries.get_or_create(&Reason { reason });
        }
        Metrics { registry, ..m }
    }

    /// The exposition, OpenMetrics text format.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing to a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }

    /// Sets the gauges read from the database.
    pub fn set_status(&self, status: &Status) {
        self.pending.set(status.pending);
        self.retrying.set(status.retrying);
        self.dead_letters.set(status.dead_letters);
        self.oldest_pending_age
            .set(status.oldest_pending_age_seconds.unwrap_or(0.0).max(0.0));
    }

    /// Sets every gauge read from the database.
    pub fn set_database_gauges(&self, gauges: &DbGauges) {
        self.set_status(&gauges.status);
        self.oldest_claimable_age
            .set(gauges.oldest_claimable_age_seconds.max(0.0));
        self.oldest_xmin_age
            .set(gauges.oldest_xmin_age_seconds.max(0.0));
        self.paused.set(gauges.paused);
    }

    /// Sets `outbox_relay_info`, once, when the relay starts.
    pub fn set_relay_info(&self, info: RelayInfo) {
        self.relay_info.get_or_create(&info).set(1);
    }

    /// Sets `outbox_database_up`; only `DbProbe` calls it, with its
    /// verdict. While it is 0 the database gauges keep their last values.
    pub fn set_database_up(&self, up: bool) {
        self.database_up.set(i64::from(up));
    }

    /// The partitions held, as of the last lease round.
    pub fn partitions(&self) -> (i64, i64) {
        (self.partitions_owned.get(), self.partitions_total.get())
    }

    fn event_type_label(&self, event_type: &str) -> EventType {
        let mut seen = self.event_types.lock().unwrap_or_else(|e| e.into_inner());
        let known = seen.contains(event_type);
        let event_type = if known || seen.len() < MAX_EVENT_TYPES {
            if !known {
                seen.insert(event_type.to_owned());
            }
            event_type.to_owned()
        } else {
            "other".to_owned()
        };
        EventType { event_type }
    }
}

impl RelayObserver for Metrics {
    fn on_batch(&self, report: &BatchReport<'_>) {
        self.batches.inc();
        if report.outage.is_none() && report.claimed > 0 {
            self.publisher_up.set(1);
        }
        self.batch_duration.observe(report.duration.as_secs_f64());
        self.published.inc_by(report.delivered.len() as u64);
        for event in report.delivered {
            let latency = (report.acked_at - event.created_at)
                .to_std()
                .unwrap_or(Duration::ZERO);
            self.commit_to_ack.observe(latency.as_secs_f64());
        }
        for (event, _) in report.retried {
            self.failed
                .get_or_create(&self.event_type_label(&event.event_type))
                .inc();
            self.retries
                .get_or_create(&Reason { reason: "retry" })
                .inc();
        }
        for (event, _) in report.dead_lettered {
            self.failed
                .get_or_create(&self.event_type_label(&event.event_type))
                .inc();
            self.dead_lettered.inc();
        }
    }

    fn on_outage(&self, kind: OutageKind, _error: &str) {
        if kind == OutageKind::Broker {
            self.publisher_up.set(0);
        }
        let reason = match kind {
            OutageKind::Broker => "unavailable",
            OutageKind::Database => "database",
            _ => "other",
        };
        self.retries.get_or_create(&Reason { reason }).inc();
    }

    /// The one writer of both partition gauges.
    fn on_ownership(&self, held: usize, total: usize) {
        self.partitions_owned.set(held as i64);
        self.partitions_total.set(total as i64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use outbox::Event;

    fn event(event_type: &str, age_ms: i64) -> Event {
        Event {
            id: uuid::Uuid::new_v4(),
            seq: 1,
            aggregate_type: "order".into(),
            aggregate_id: "1".into(),
            event_type: event_type.into(),
            payload: "{}".into(),
            headers: Default::default(),
            topic: None,
            attempts: 0,
            created_at: chrono::Utc::now() - chrono::TimeDelta::milliseconds(age_ms),
            partition: 0,
        }
    }

    fn value(text: &str, sample: &str) -> f64 {
        text.lines()
            .find_map(|l| l.strip_prefix(sample)?.strip_prefix(' ')?.parse().ok())
            .unwrap_or_else(|| panic!("no sample {sample} in\n{text}"))
    }

    #[test]
    fn batches_outages_and_ownership_are_counted() {
        let m = Metrics::new();
        let delivered = vec![event("order.created", 200), event("order.created", 20)];
        let retried = vec![(event("order.paid", 0), "timeout".to_owned())];
        let dead = vec![(event("order.paid", 0), "too large".to_owned())];
        m.on_batch(&BatchReport {
            claimed: 4,
            delivered: &delivered,
            retried: &retried,
            dead_lettered: &dead,
            outage: None,
            acked_at: chrono::Utc::now(),
            duration: Duration::from_millis(3),
        });
        m.on_outage(OutageKind::Broker, "down");
        m.on_outage(OutageKind::Database, "down");
        m.on_outage(OutageKind::Database, "down");
        m.on_ownership(7, 32);
        let text = m.encode();
        let expected = [
            ("outbox_events_published_total", 2.0),
            ("outbox_events_failed_total{event_type=\"order.paid\"}", 2.0),
            ("outbox_events_dead_lettered_total", 1.0),
            ("outbox_retries_total{reason=\"retry\"}", 1.0),
            ("outbox_retries_total{reason=\"unavailable\"}", 1.0),
            ("outbox_retries_total{reason=\"database\"}", 2.0),
            ("outbox_batch_duration_seconds_count", 1.0),
            ("outbox_commit_to_ack_seconds_count", 2.0),
            ("outbox_commit_to_ack_seconds_bucket{le=\"0.1\"}", 1.0),
            ("outbox_commit_to_ack_seconds_bucket{le=\"0.25\"}", 2.0),
            ("outbox_partitions_owned", 7.0),
            ("outbox_partitions", 32.0),
        ];
        for (sample, want) in expected {
            assert_eq!(value(&text, sample), want, "{sample}");
        }
    }

    #[test]
    fn event_type_labels_are_bounded() {
        let m = Metrics::new();
        for i in 0..MAX_EVENT_TYPES + 20 {
            let retried = vec![(event(&format!("type.{i}"), 0), "x".to_owned())];
            m.on_batch(&BatchReport {
                claimed: 1,
                delivered: &[],
                retried: &retried,
                dead_lettered: &[],
                outage: None,
                acked_at: chrono::Utc::now(),
                duration: Duration::ZERO,
            });
        }
        let text = m.encode();
        let series = text
            .lines()
            .filter(|l| l.starts_with("outbox_events_failed_total{"))
            .count();
        assert_eq!(series, MAX_EVENT_TYPES + 1);
        assert_eq!(
            value(&text, "outbox_events_failed_total{event_type=\"other\"}"),
            20.0
        );
    }

    #[test]
    fn database_gauges_come_from_the_status() {
        let m = Metrics::new();
        m.set_status(&Status {
            schema: "public".into(),
            pending: 12,
            retrying: 2,
            dead_letters: 3,
            oldest_pending_age_seconds: Some(4.5),
            partitions: Vec::new(),
        });
        let text = m.encode();
        assert_eq!(value(&text, "outbox_events_pending"), 12.0);
        assert_eq!(value(&text, "outbox_dead_letters"), 3.0);
        assert_eq!(value(&text, "outbox_oldest_pending_age_seconds"), 4.5);
        assert_eq!(value(&text, "outbox_database_up"), 0.0, "not checked yet");
        m.set_database_up(true);
        assert_eq!(value(&m.encode(), "outbox_database_up"), 1.0);
        m.set_database_up(false);
        let text = m.encode();
        assert_eq!(value(&text, "outbox_database_up"), 0.0);
        assert_eq!(value(&text, "outbox_events_pending"), 12.0, "kept");
    }

    #[test]
    fn the_publisher_is_down_from_a_broker_outage_until_a_batch_gets_through() {
        let m = Metrics::new();
        assert_eq!(
            value(&m.encode(), "outbox_publisher_up"),
            1.0,
            "no outage seen"
        );
        m.on_outage(OutageKind::Database, "down");
        assert_eq!(
            value(&m.encode(), "outbox_publisher_up"),
            1.0,
            "not the broker"
        );
        m.on_outage(OutageKind::Broker, "refused");
        assert_eq!(value(&m.encode(), "outbox_publisher_up"), 0.0);
        let delivered = vec![event("order.created", 0)];
        let batch = |outage| BatchReport {
            claimed: 1,
            delivered: &delivered,
            retried: &[],
            dead_lettered: &[],
            outage,
            acked_at: chrono::Utc::now(),
            duration: Duration::ZERO,
        };
        m.on_batch(&batch(Some("refused")));
        assert_eq!(value(&m.encode(), "outbox_publisher_up"), 0.0, "cut short");
        m.on_batch(&batch(None));
        assert_eq!(value(&m.encode(), "outbox_publisher_up"), 1.0);
    }

    #[test]
    fn the_relay_info_names_this_relay() {
        let m = Metrics::new();
        assert!(
            !m.encode().contains("outbox_relay_info{"),
            "none before start"
        );
        m.set_relay_info(RelayInfo {
            version: "1.2.3".into(),
            instance_id: "relay-a".into(),
            schema: "app".into(),
            publisher: "webhook".into(),
        });
        let sample = "outbox_relay_info{version=\"1.2.3\",instance_id=\"relay-a\",schema=\"app\",publisher=\"webhook\"}";
        assert_eq!(value(&m.encode(), sample), 1.0);
    }

    #[test]
    fn the_claimable_and_xmin_ages_come_from_the_database_read() {
        let m = Metrics::new();
        m.set_database_gauges(&DbGauges {
            status: Status {
                schema: "public".into(),
                pending: 5,
                retrying: 1,
                dead_letters: 0,
                oldest_pending_age_seconds: Some(90.0),
                partitions: Vec::new(),
            },
            oldest_claimable_age_seconds: 12.5,
            oldest_xmin_age_seconds: 700.0,
            paused: 2,
        });
        let text = m.encode();
        assert_eq!(value(&text, "outbox_events_pending"), 5.0);
        assert_eq!(value(&text, "outbox_oldest_pending_age_seconds"), 90.0);
        assert_eq!(value(&text, "outbox_paused"), 2.0);
        assert_eq!(value(&text, "outbox_oldest_claimable_age_seconds"), 12.5);
        assert_eq!(value(&text, "outbox_oldest_xmin_age_seconds"), 700.0);
    }
}
