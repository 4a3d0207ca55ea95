//! What the relay tells the outside: counters for quick reads and an
//! observer hook for metrics exporters.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::event::Event;

/// Running totals of one relay instance.
#[derive(Debug, Default)]
pub struct RelayStats {
    delivered: AtomicU64,
    retried: AtomicU64,
    dead_lettered: AtomicU64,
    outages: AtomicU64,
    batches: AtomicU64,
    fenced_out: AtomicU64,
    refused_messages: AtomicU64,
}

/// A copy of [`RelayStats`] at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct StatsSnapshot {
    /// Events acknowledged by the broker.
    pub delivered: u64,
    /// Failed attempts scheduled for retry.
    pub retried: u64,
    /// Events dead-lettered.
    pub dead_lettered: u64,
    /// Batches cut short by a transport or database outage.
    pub outages: u64,
    /// Batches published.
    pub batches: u64,
    /// Failure updates refused because the partition changed owner.
    pub fenced_out: u64,
    /// WAL mode: messages with the outbox's prefix that no row could hold
    /// (not what `outbox_emit` writes, a value the table refuses, a second
    /// message with an id already read), logged and never published.
    pub refused_messages: u64,
}

impl RelayStats {
    pub(crate) fn add(&self, batch: &BatchReport<'_>) {
        self.batches.fetch_add(1, Ordering::Relaxed);
        self.delivered
            .fetch_add(batch.delivered.len() as u64, Ordering::Relaxed);
        self.retried
            .fetch_add(batch.retried.len() as u64, Ordering::Relaxed);
        self.dead_lettered
            .fetch_add(batch.dead_lettered.len() as u64, Ordering::Relaxed);
        if batch.outage.is_some() {
            self.outages.fetch_add(1, Ordering::Relaxed);
        }
    }

    pub(crate) fn add_outage(&self) {
        self.outages.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn add_fenced_out(&self, n: u64) {
        self.fenced_out.fetch_add(n, Ordering::Relaxed);
    }

    pub(crate) fn add_refused_message(&self) {
        self.refused_messages.fetch_add(1, Ordering::Relaxed);
    }

    /// Reads every counter.
    pub fn snapshot(&self) -> StatsSnapshot {
        StatsSnapshot {
            delivered: self.delivered.load(Ordering::Relaxed),
            retried: self.retried.load(Ordering::Relaxed),
            dead_lettered: self.dead_lettered.load(Ordering::Relaxed),
            outages: self.outages.load(Ordering::Relaxed),
            batches: self.batches.load(Ordering::Relaxed),
            fenced_out: self.fenced_out.load(Ordering::Relaxed),
            refused_messages: self.refused_messages.load(Ordering::Relaxed),
        }
    }
}

/// What one batch did.
#[derive(Debug)]
pub struct BatchReport<'a> {
    /// Events claimed.
    pub claimed: usize,
    /// Events acknowledged by the broker (and marked done).
    pub delivered: &'a [Event],
    /// Events that failed and will be retried, with their errors.
    pub retried: &'a [(Event, String)],
    /// Events dead-lettered, with their errors.
    pub dead_lettered: &'a [(Event, String)],
    /// Set when a transport outage cut the batch short.
    pub outage: Option<&'a str>,
    /// When the batch was acknowledged.
    pub acked_at: DateTime<Utc>,
    /// From claim to acknowledgement.
    pub duration: Duration,
}

/// Where an outage was seen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum OutageKind {
    /// The publisher's transport.
    Broker,
    /// PostgreSQL.
    Database,
}

/// Hooks for metrics exporters; every method has a no-op default.
pub trait RelayObserver: Send + Sync + 'static {
    /// After every published batch.
    fn on_batch(&self, _report: &BatchReport<'_>) {}
    /// When the broker or the database is found down.
    fn on_outage(&self, _kind: OutageKind, _error: &str) {}
    /// After every lease round, with the number of partitions held.
    fn on_ownership(&self, _held: usize, _total: usize) {}
    /// WAL mode: when a message with the outbox's prefix is refused,
    /// never published (`rule`: `utf8`, `format`, `length`, `nul`,
    /// `payload`, `duplicate_id`).
    fn on_refused_message(&self, _rule: &str) {}
}
