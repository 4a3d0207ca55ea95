//! The consumer's check: every event of a run arrived, and each
//! aggregate's events first arrived in the order they were written. No
//! broker, no clock, no I/O: [`Tally::record`] decides what one arrival is.
//!
//! Event `i` of a run of `aggregates` aggregates belongs to aggregate
//! `i % aggregates` and is that aggregate's event `n = i / aggregates`;
//! its body says all three ([`body`]), so a message that was corrupted or
//! belongs to another run is caught as well as a lost or reordered one.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use serde::Deserialize;

/// The body of event `i`: the JSON text PostgreSQL prints for the `jsonb`
/// the producers store (keys by length, then alphabetically; a space after
/// `:` and `,`), so the relay and the reference send the same bytes. About
/// 200 bytes.
pub fn body(i: u64, aggregates: u32) -> String {
    let (a, n) = (i % u64::from(aggregates), i / u64::from(aggregates));
    let head = format!(r#"{{"a": {a}, "i": {i}, "n": {n}, "pad": ""#);
    let pad = "x".repeat(PAD.saturating_sub(head.len()));
    format!(r#"{head}{pad}"}}"#)
}

/// Bytes of [`body`] before its closing `"}`.
const PAD: usize = 198;

/// What one message says about itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub struct Said {
    pub i: u64,
    pub a: u64,
    pub n: u64,
}

impl Said {
    /// Reads a message body; `None` if it is not one of [`body`]'s.
    pub fn parse(bytes: &[u8]) -> Option<Said> {
        serde_json::from_slice(bytes).ok()
    }
}

/// What an arrival was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arrival {
    /// The event's first delivery, in its aggregate's order.
    First,
    /// The event's first delivery, but an earlier event of its aggregate
    /// has not arrived yet: reordered (or the earlier one was lost).
    OutOfOrder { expected_n: u64 },
    /// The event arrived before (an at-least-once redelivery).
    Duplicate,
    /// Not an event of this run (unreadable, out of range, or its aggregate
    /// and number disagree with its index).
    Foreign,
}

/// Arrivals so far of a run of `events` events over `aggregates`
/// aggregates.
#[derive(Debug)]
pub struct Tally {
    aggregates: u32,
    seen: Vec<bool>,
    next_n: Vec<u64>,
    pub distinct: u64,
    pub duplicates: u64,
    pub out_of_order: u64,
    pub foreign: u64,
    /// The first few faults, for the error message.
    pub examples: Vec<String>,
}

impl Tally {
    pub fn new(events: u64, aggregates: u32) -> Tally {
        Tally {
            aggregates,
            seen: vec![false; events as usize],
            next_n: vec![0; aggregates as usize],
            distinct: 0,
            duplicates: 0,
            out_of_order: 0,
            foreign: 0,
            examples: Vec::new(),
        }
    }

    /// Events the run has.
    pub fn events(&self) -> u64 {
        self.seen.len() as u64
    }

    /// Whether every event has arrived.
    pub fn complete(&self) -> bool {
        self.distinct == self.events()
    }

    /// Whether nothing was lost, reordered or foreign (duplicates are
    /// allowed: delivery is at least once).
    pub fn clean(&self) -> bool {
        self.complete() && self.out_of_order == 0 && self.foreign == 0
    }

    /// Records one arrival (`None`: a body that could not be read).
    pub fn record(&mut self, said: Option<Said>) -> Arrival {
        let arrival = self.classify(said);
        match arrival {
            Arrival::First => self.distinct += 1,
            Arrival::OutOfOrder { .. } => {
                self.distinct += 1;
                self.out_of_order += 1;
            }
            Arrival::Duplicate => self.duplicates += 1,
            Arrival::Foreign => self.foreign += 1,
        }
        if !matches!(arrival, Arrival::First | Arrival::Duplicate) && self.examples.len() < 5 {
            self.examples.push(format!("{said:?}: {arrival:?}"));
        }
        arrival
    }

    fn classify(&mut self, said: Option<Said>) -> Arrival {
        let Some(Said { i, a, n }) = said else {
            return Arrival::Foreign;
        };
        let per = u64::from(self.aggregates);
        if i >= self.events() || a != i % per || n != i / per {
            return Arrival::Foreign;
        }
        if std::mem::replace(&mut self.seen[i as usize], true) {
            return Arrival::Duplicate;
        }
        let events = self.events();
        let next = &mut self.next_n[a as usize];
        if n == *next {
            // Later events of this aggregate that arrived early (counted
            // out of order) are skipped over.
            *next += 1;
            while *next * per + a < events && self.seen[(*next * per + a) as usize] {
                *next += 1;
            }
            Arrival::First
        } else {
            Arrival::OutOfOrder { expected_n: *next }
        }
    }

    /// What is wrong, in one sentence for the error (empty if clean).
    pub fn faults(&self) -> String {
        if self.clean() {
            return String::new();
        }
        format!(
            "{} of {} events arrived, {} out of their aggregate's order, {} not of this run (first: {})",
            self.distinct,
            self.events(),
            self.out_of_order,
            self.foreign,
            self.examples.join("; ")
        )
    }
}

/// One run's arrivals: the check, and when each event first arrived.
pub struct Arrivals {
    inner: Mutex<(Tally, Vec<Option<Instant>>)>,
    distinct: AtomicU64,
    /// Messages the broker handed the consumer again at a position it had
    /// already read (not the relay's doing, so not duplicates).
    read_again: AtomicU64,
}

impl Arrivals {
    pub fn new(events: u64, aggregates: u32) -> Arc<Arrivals> {
        Arc::new(Arrivals {
            inner: Mutex::new((Tally::new(events, aggregates), vec![None; events as usize])),
            distinct: AtomicU64::new(0),
            read_again: AtomicU64::new(0),
        })
    }

    /// The broker handed the consumer a message again at a position it
    /// had read already.
    pub fn read_again(&self) {
        self.read_again.fetch_add(1, Ordering::Relaxed);
    }

    /// Messages read again at a position already read, so far.
    pub fn reads_again(&self) -> u64 {
        self.read_again.load(Ordering::Relaxed)
    }

    /// Records one message body, arrived now.
    pub fn record(&self, body: &[u8]) {
        let at = Instant::now();
        let said = Said::parse(body);
        let mut inner = self.inner.lock().expect("lock");
        let (tally, times) = &mut *inner;
        if let (Arrival::First | Arrival::OutOfOrder { .. }, Some(s)) = (tally.record(said), said) {
            times[s.i as usize] = Some(at);
            self.distinct.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Distinct events arrived so far.
    pub fn distinct(&self) -> u64 {
        self.distinct.load(Ordering::Relaxed)
    }

    /// The check and the arrival times, as they are now.
    pub fn snapshot(&self) -> (Tally, Vec<Option<Instant>>) {
        let mut inner = self.inner.lock().expect("lock");
        let (tally, times) = &mut *inner;
        (
            std::mem::replace(tally, Tally::new(0, 1)),
            std::mem::take(times),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn said(i: u64, aggregates: u32) -> Option<Said> {
        Said::parse(body(i, aggregates).as_bytes())
    }

    #[test]
    fn bodies_are_about_200_bytes_and_read_back() {
        let b = body(123_456, 10_000);
        assert_eq!(b.len(), 200, "{b}");
        let s = Said::parse(b.as_bytes()).unwrap();
        assert_eq!((s.i, s.a, s.n), (123_456, 3_456, 12));
    }

    #[test]
    fn every_event_once_in_order_is_clean() {
        let mut t = Tally::new(12, 3);
        for i in [0, 2, 1, 4, 3, 5, 8, 7, 6, 9, 10, 11] {
            assert_eq!(t.record(said(i, 3)), Arrival::First, "{i}");
        }
        assert!(t.clean(), "{}", t.faults());
    }

    #[test]
    fn a_redelivery_is_a_duplicate_and_not_a_fault() {
        let mut t = Tally::new(4, 2);
        for i in [0, 1, 0, 2, 3, 2] {
            t.record(said(i, 2));
        }
        assert_eq!(t.duplicates, 2);
        assert!(t.clean());
    }

    #[test]
    fn a_lost_event_leaves_the_run_incomplete() {
        let mut t = Tally::new(4, 2);
        for i in [0, 1, 3] {
            t.record(said(i, 2));
        }
        assert!(!t.complete() && !t.clean());
        assert!(t.faults().contains("3 of 4"), "{}", t.faults());
    }

    #[test]
    fn an_event_ahead_of_its_aggregates_earlier_one_is_out_of_order() {
        let mut t = Tally::new(6, 2);
        t.record(said(0, 2));
        // Aggregate 0's n = 2 before its n = 1.
        assert_eq!(t.record(said(4, 2)), Arrival::OutOfOrder { expected_n: 1 });
        assert_eq!(t.record(said(2, 2)), Arrival::First);
        for i in [1, 3, 5] {
            assert_eq!(t.record(said(i, 2)), Arrival::First);
        }
        assert!(t.complete());
        assert!(!t.clean());
        assert_eq!(t.out_of_order, 1);
    }

    #[test]
    fn bodies_of_another_run_or_unreadable_are_foreign() {
        let mut t = Tally::new(4, 2);
        assert_eq!(t.record(said(9, 2)), Arrival::Foreign);
        assert_eq!(t.record(said(2, 3)), Arrival::Foreign);
        assert_eq!(t.record(Said::parse(b"{}")), Arrival::Foreign);
        assert_eq!(t.foreign, 3);
    }
}
