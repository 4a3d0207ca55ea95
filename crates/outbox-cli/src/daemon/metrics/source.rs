//! One source's series: [`SourceMetrics`], the handle its relay observes
//! through and its database refresher and check write to.

use std::collections::HashSet;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use outbox::{BatchReport, OutageKind, RelayObserver, Status};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;

use super::{
    DbGauges, Families, SourceEventType, SourceLabel, SourceReason, SourceRule, REFUSAL_RULES,
};

/// The series of one source (label `source`). Cheap to clone: every clone,
/// like every [`super::Metrics::source`] of the same name, counts into the
/// same series.
#[derive(Clone, Debug)]
pub struct SourceMetrics {
    inner: Arc<Series>,
}

/// The per-source entries of the families, taken once so the hot path
/// neither hashes the label nor locks a family.
#[derive(Debug)]
struct Series {
    name: String,
    families: Arc<Families>,
    published: Counter,
    dead_lettered: Counter,
    batches: Counter,
    retried: Counter,
    broker_down: Counter,
    database_down: Counter,
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
    paused: Gauge,
    slot_lag_bytes: Gauge,
    slot_retained_bytes: Gauge,
    slot_active: Gauge,
    /// `outbox_messages_refused`, one per rule, in [`REFUSAL_RULES`]' order.
    refused: Vec<Counter>,
    /// The event types this source's failures were counted under (the
    /// series to remove when it is forgotten); `None` once it is, so a
    /// late failure does not bring a series back.
    event_types: Mutex<Option<HashSet<String>>>,
}

impl SourceMetrics {
    /// Creates the series of source `name` in `families`.
    pub(super) fn new(families: Arc<Families>, name: &str) -> Self {
        let label = SourceLabel {
            source: name.to_owned(),
        };
        let f = &families;
        let reason = |reason| {
            f.retries.get_or_create_owned(&SourceReason {
                source: name.to_owned(),
                reason,
            })
        };
        let series = Series {
            published: f.published.get_or_create_owned(&label),
            dead_lettered: f.dead_lettered.get_or_create_owned(&label),
            batches: f.batches.get_or_create_owned(&label),
            retried: reason("retry"),
            broker_down: reason("unavailable"),
            database_down: reason("database"),
            batch_duration: f.batch_duration.get_or_create_owned(&label),
            commit_to_ack: f.commit_to_ack.get_or_create_owned(&label),
            pending: f.pending.get_or_create_owned(&label),
            retrying: f.retrying.get_or_create_owned(&label),
            oldest_pending_age: f.oldest_pending_age.get_or_create_owned(&label),
            oldest_claimable_age: f.oldest_claimable_age.get_or_create_owned(&label),
            oldest_xmin_age: f.oldest_xmin_age.get_or_create_owned(&label),
            dead_letters: f.dead_letters.get_or_create_owned(&label),
            partitions_owned: f.partitions_owned.get_or_create_owned(&label),
            partitions_total: f.partitions_total.get_or_create_owned(&label),
            database_up: f.database_up.get_or_create_owned(&label),
            publisher_up: f.publisher_up.get_or_create_owned(&label),
            paused: f.paused.get_or_create_owned(&label),
            slot_lag_bytes: f.slot_lag_bytes.get_or_create_owned(&label),
            slot_retained_bytes: f.slot_retained_bytes.get_or_create_owned(&label),
            slot_active: f.slot_active.get_or_create_owned(&label),
            refused: REFUSAL_RULES
                .iter()
                .map(|rule| {
                    f.refused.get_or_create_owned(&SourceRule {
                        source: name.to_owned(),
                        rule,
                    })
                })
                .collect(),
            event_types: Mutex::new(Some(HashSet::new())),
            name: label.source,
            families: families.clone(),
        };
        series.publisher_up.set(1);
        SourceMetrics {
            inner: Arc::new(series),
        }
    }

    /// The source's name, its `source` label.
    #[cfg_attr(not(test), allow(dead_code))] // for the relay of many sources
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// Sets the gauges read from the database.
    pub fn set_status(&self, status: &Status) {
        let s = &self.inner;
        s.pending.set(status.pending);
        s.retrying.set(status.retrying);
        s.dead_letters.set(status.dead_letters);
        s.oldest_pending_age
            .set(status.oldest_pending_age_seconds.unwrap_or(0.0).max(0.0));
        let slot = status.slot.as_ref();
        s.slot_lag_bytes
            .set(slot.and_then(|s| s.lag_bytes).unwrap_or(0).max(0));
        s.slot_retained_bytes
            .set(slot.and_then(|s| s.retained_bytes).unwrap_or(0).max(0));
        s.slot_active.set(i64::from(slot.is_some_and(|s| s.active)));
    }

    /// Sets every gauge read from the database.
    pub fn set_database_gauges(&self, gauges: &DbGauges) {
        let s = &self.inner;
        self.set_status(&gauges.status);
        s.oldest_claimable_age
            .set(gauges.oldest_claimable_age_seconds.max(0.0));
        s.oldest_xmin_age
            .set(gauges.oldest_xmin_age_seconds.max(0.0));
        s.paused.set(gauges.paused);
    }

    /// Sets `outbox_database_up`; only the source's `DbProbe` calls it,
    /// with its verdict. While it is 0 the database gauges keep their last
    /// values.
    pub fn set_database_up(&self, up: bool) {
        self.inner.database_up.set(i64::from(up));
    }

    /// The partitions held and seen, as of the last lease round.
    pub fn partitions(&self) -> (i64, i64) {
        (
            self.inner.partitions_owned.get(),
            self.inner.partitions_total.get(),
        )
    }

    /// Counts one failed attempt of an event of `event_type`, unless the
    /// source was forgotten.
    fn failed(&self, event_type: &str) {
        let mut used = self
            .inner
            .event_types
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let Some(used) = used.as_mut() else {
            return;
        };
        let families = &self.inner.families;
        let event_type = families.event_type_label(event_type);
        families
            .failed
            .get_or_create(&SourceEventType {
                source: self.inner.name.clone(),
                event_type: event_type.clone(),
            })
            .inc();
        used.insert(event_type);
    }

    /// Counts a round abandoned for an outage of a kind without a reason
    /// of its own, unless the source was forgotten.
    fn other_outage(&self) {
        let used = self
            .inner
            .event_types
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if used.is_some() {
            self.inner
                .families
                .retries
                .get_or_create(&SourceReason {
                    source: self.inner.name.clone(),
                    reason: "other",
                })
                .inc();
        }
    }

    /// Removes every series of this source from the families; later counts
    /// go nowhere.
    pub(super) fn forget(&self) {
        let mut guard = self
            .inner
            .event_types
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        // Removed while holding the lock, so no failure counted
        // concurrently brings a series back.
        let used = guard.take().unwrap_or_default();
        self.inner.families.remove(&self.inner.name, used);
    }
}

impl RelayObserver for SourceMetrics {
    fn on_batch(&self, report: &BatchReport<'_>) {
        let s = &self.inner;
        s.batches.inc();
        if report.outage.is_none() && report.claimed > 0 {
            s.publisher_up.set(1);
        }
        s.batch_duration.observe(report.duration.as_secs_f64());
        s.published.inc_by(report.delivered.len() as u64);
        for event in report.delivered {
            let latency = (report.acked_at - event.created_at)
                .to_std()
                .unwrap_or(Duration::ZERO);
            s.commit_to_ack.observe(latency.as_secs_f64());
        }
        for (event, _) in report.retried {
            self.failed(&event.event_type);
            s.retried.inc();
        }
        for (event, _) in report.dead_lettered {
            self.failed(&event.event_type);
            s.dead_lettered.inc();
        }
    }

    fn on_outage(&self, kind: OutageKind, _error: &str) {
        let s = &self.inner;
        match kind {
            OutageKind::Broker => {
                s.publisher_up.set(0);
                s.broker_down.inc();
            }
            OutageKind::Database => {
                s.database_down.inc();
            }
            _ => self.other_outage(),
        }
    }

    fn on_refused_message(&self, rule: &str) {
        let s = &self.inner;
        let at = REFUSAL_RULES
            .iter()
            .position(|r| *r == rule)
            .unwrap_or(REFUSAL_RULES.len() - 1);
        s.refused[at].inc();
    }

    /// The one writer of both partition gauges.
    fn on_ownership(&self, held: usize, total: usize) {
        self.inner.partitions_owned.set(held as i64);
        self.inner.partitions_total.set(total as i64);
    }
}
