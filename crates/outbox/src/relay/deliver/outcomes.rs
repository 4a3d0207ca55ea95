//! Where a publisher's outcomes become the relay's decisions, for both
//! sources of events: a pure function from a group and its outcomes to
//! deliveries, retries, dead letters and an outage. No database, no clock,
//! no I/O: the core publishes, this decides, the source settles (the table
//! worker writes rows, the WAL reader sets events aside).

use std::collections::HashSet;
use std::time::Duration;

use crate::event::Event;
use crate::publisher::Outcome;
use crate::relay::backoff::retry_delay;
use crate::relay::store::Failure;

/// How failed events are retried (from [`crate::RelayConfig`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct RetryPolicy {
    /// Attempts before an event is dead-lettered.
    pub max_attempts: u32,
    /// First retry delay.
    pub backoff_base_ms: u64,
    /// Longest retry delay.
    pub backoff_max_ms: u64,
}

impl RetryPolicy {
    /// After a failure of an event that had failed `attempts` times: the
    /// wait before its next attempt (the backoff, or the broker's `hint` if
    /// longer, up to `backoff_max_ms`), and whether it is out of attempts.
    pub fn next_attempt(&self, attempts: i32, hint: Duration) -> (Duration, bool) {
        let attempts = attempts.max(0) as u32 + 1;
        let backoff = retry_delay(attempts, self.backoff_base_ms, self.backoff_max_ms);
        let delay = backoff.max(hint.min(Duration::from_millis(self.backoff_max_ms)));
        (delay, attempts >= self.max_attempts)
    }
}

/// What one batch came to, call by call.
#[derive(Debug, Default)]
pub(crate) struct Settlement {
    /// Acknowledged by the broker: to be marked done.
    pub delivered: Vec<Event>,
    /// Failed, to be tried again after a backoff, with the error.
    pub retried: Vec<(Event, String)>,
    /// Dead-lettered, with the error.
    pub dead: Vec<(Event, String)>,
    /// The rows to write for `retried` and `dead` (fenced by ownership).
    pub failures: Vec<Failure>,
    /// Aggregates whose later events must not be published in this batch:
    /// one of theirs failed, was not sent, or lies in a lapsed partition.
    pub blocked: HashSet<String>,
    /// Set when the transport failed: the batch ends here, no attempt is
    /// counted for what was not acknowledged.
    pub outage: Option<String>,
    /// The events a publisher answered `Unavailable` for: not sent, no
    /// attempt counted. The table keeps them as rows; the WAL reader sends
    /// them again after the outage.
    pub unsent: Vec<Event>,
}

impl Settlement {
    /// Removes from `group` the events whose aggregate is blocked (the lanes
    /// stop a blocked aggregate themselves; this states the rule).
    #[cfg(test)]
    pub fn unblocked(&self, group: Vec<Event>) -> Vec<Event> {
        if self.blocked.is_empty() {
            return group;
        }
        group
            .into_iter()
            .filter(|e| !self.blocked.contains(&e.aggregate_id))
            .collect()
    }

    /// Holds back the rest of an event's aggregate without an outcome
    /// (its partition's lease is about to lapse).
    pub fn hold(&mut self, event: Event) {
        self.blocked.insert(event.aggregate_id);
    }

    /// Ends the batch as an outage: nothing more is published.
    pub fn transport_down(&mut self, error: String) {
        self.outage.get_or_insert(error);
    }

    /// Records the outcome of each event of `group`, in order. A missing
    /// outcome (a publisher that returned too few) counts as a retry; extra
    /// ones are ignored.
    pub fn settle(&mut self, group: Vec<Event>, outcomes: Vec<Outcome>, policy: &RetryPolicy) {
        let sent = group.len();
        let mut outcomes = outcomes.into_iter();
        for event in group {
            let outcome = outcomes.next().unwrap_or_else(|| {
                Outcome::Retry(format!(
                    "publisher returned no outcome ({sent} events sent)"
                ))
            });
            self.settle_one(event, outcome, policy);
        }
    }

    fn settle_one(&mut self, event: Event, outcome: Outcome, policy: &RetryPolicy) {
        match outcome {
            Outcome::Delivered => self.delivered.push(event),
            Outcome::Retry(error) => self.retry(event, error, Duration::ZERO, policy),
            Outcome::RetryAfter(error, hint) => self.retry(event, error, hint, policy),
            Outcome::Unavailable(error) => {
                // Not sent: no attempt counted, successors held, and the
                // batch ends here as an outage.
                self.blocked.insert(event.aggregate_id.clone());
                self.transport_down(error);
                self.unsent.push(event);
            }
            Outcome::Rejected(error) => {
                self.failures.push(Failure {
                    id: event.id,
                    error: error.clone(),
                    delay: Duration::ZERO,
                    dead: true,
                });
                self.blocked.insert(event.aggregate_id.clone());
                self.dead.push((event, error));
            }
        }
    }

    /// Counts an attempt and schedules the next one after the backoff, or
    /// after the broker's `hint` if that is longer (up to `backoff_max_ms`).
    fn retry(&mut self, event: Event, error: String, hint: Duration, policy: &RetryPolicy) {
        let (delay, give_up) = policy.next_attempt(event.attempts, hint);
        self.failures.push(Failure {
            id: event.id,
            error: error.clone(),
            delay,
            dead: give_up,
        });
        self.blocked.insert(event.aggregate_id.clone());
        if give_up {
            self.dead.push((event, error));
        } else {
            self.retried.push((event, error));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const POLICY: RetryPolicy = RetryPolicy {
        max_attempts: 3,
        backoff_base_ms: 100,
        backoff_max_ms: 1_000,
    };

    fn ev(aggregate: &str, attempts: i32) -> Event {
        Event {
            attempts,
            ..crate::event::test_event(0, aggregate)
        }
    }

    /// A fresh settlement of one group under [`POLICY`].
    fn settled(group: Vec<Event>, outcomes: Vec<Outcome>) -> Settlement {
        let mut s = Settlement::default();
        s.settle(group, outcomes, &POLICY);
        s
    }

    #[test]
    fn delivered_events_are_only_delivered() {
        let s = settled(
            vec![ev("a", 0), ev("b", 0)],
            vec![Outcome::Delivered, Outcome::Delivered],
        );
        assert_eq!(s.delivered.len(), 2);
        assert!(s.failures.is_empty() && s.blocked.is_empty() && s.outage.is_none());
    }

    #[test]
    fn a_retry_counts_an_attempt_backs_off_and_blocks_its_aggregate() {
        let s = settled(vec![ev("a", 0)], vec![Outcome::Retry("busy".into())]);
        assert_eq!(s.retried.len(), 1);
        let f = &s.failures[0];
        assert!(!f.dead && f.error == "busy");
        assert!(f.delay >= Duration::from_millis(50) && f.delay <= Duration::from_millis(100));
        assert!(s.blocked.contains("a"));
        assert_eq!(s.unblocked(vec![ev("a", 0), ev("b", 0)]).len(), 1);
    }

    #[test]
    fn a_retry_after_waits_for_the_hint_capped_by_backoff_max() {
        let s = settled(
            vec![ev("a", 0), ev("b", 0), ev("c", 0)],
            vec![
                Outcome::RetryAfter("429".into(), Duration::from_millis(700)),
                Outcome::RetryAfter("429".into(), Duration::from_secs(3_600)),
                Outcome::RetryAfter("503".into(), Duration::ZERO),
            ],
        );
        assert_eq!(s.retried.len(), 3, "a hint still counts an attempt");
        let delays: Vec<Duration> = s.failures.iter().map(|f| f.delay).collect();
        assert_eq!(
            delays[0],
            Duration::from_millis(700),
            "the hint beats a shorter backoff"
        );
        assert_eq!(
            delays[1],
            Duration::from_millis(1_000),
            "cut to backoff_max_ms"
        );
        assert!(
            delays[2] >= Duration::from_millis(50) && delays[2] <= Duration::from_millis(100),
            "a shorter hint leaves the backoff: {:?}",
            delays[2]
        );
        assert!(s.failures.iter().all(|f| !f.dead));
        assert_eq!(s.blocked.len(), 3);
        let s = settled(
            vec![ev("a", 2)],
            vec![Outcome::RetryAfter("429".into(), Duration::from_millis(10))],
        );
        assert_eq!(s.dead.len(), 1, "the last allowed attempt dead-letters");
    }

    #[test]
    fn the_last_allowed_retry_dead_letters() {
        let s = settled(vec![ev("a", 2)], vec![Outcome::Retry("busy".into())]);
        assert!(s.retried.is_empty());
        assert_eq!(s.dead.len(), 1);
        assert!(s.failures[0].dead);
    }

    #[test]
    fn a_rejection_dead_letters_at_once() {
        let s = settled(vec![ev("a", 0)], vec![Outcome::Rejected("too big".into())]);
        assert_eq!(s.dead[0].1, "too big");
        assert!(s.failures[0].dead && s.failures[0].delay == Duration::ZERO);
    }

    #[test]
    fn unavailable_burns_no_attempt_and_ends_the_batch() {
        let s = settled(
            vec![ev("a", 0), ev("b", 0)],
            vec![Outcome::Delivered, Outcome::Unavailable("link lost".into())],
        );
        assert_eq!(s.delivered.len(), 1);
        assert!(s.failures.is_empty(), "no attempt counted");
        assert_eq!(s.outage.as_deref(), Some("link lost"));
        assert!(s.blocked.contains("b"));
        assert_eq!(s.retried.len() + s.dead.len(), 0);
    }

    #[test]
    fn missing_outcomes_are_retries_and_extra_ones_are_ignored() {
        let s = settled(vec![ev("a", 0), ev("b", 0)], vec![Outcome::Delivered]);
        assert_eq!(s.delivered.len(), 1);
        assert!(s.retried[0].1.contains("no outcome"));
        let s = settled(
            vec![ev("a", 0)],
            vec![Outcome::Delivered, Outcome::Rejected("x".into())],
        );
        assert_eq!((s.delivered.len(), s.dead.len()), (1, 0));
    }

    #[test]
    fn the_first_outage_is_kept() {
        let mut s = Settlement::default();
        s.transport_down("first".into());
        s.transport_down("second".into());
        assert_eq!(s.outage.as_deref(), Some("first"));
    }
}
