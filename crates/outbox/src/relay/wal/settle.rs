//! One batch of the WAL stream, published through the delivery core
//! ([`crate::relay::deliver`]): the same lanes, publish timeout, spans and
//! outcome rules as the table mode. What differs is what becomes of the
//! events that are not delivered: those that failed, and those behind
//! them or paused, are set aside in the table ([`Aside`]); those not sent
//! because the transport is down are sent again after a wait, with no
//! attempt counted, until the outage passes or the relay stops (the slot
//! holds them meanwhile).

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use tokio::sync::watch;

use super::ahead::{Joined, Read, ReadAhead, Reading};
use super::set_aside::Aside;
use crate::event::Event;
use crate::relay::backoff::DoublingDelay;
use crate::relay::deliver::outcomes::Settlement;
use crate::relay::deliver::Core;

/// What a batch came to.
#[derive(Debug, Default)]
pub(crate) struct Settled {
    /// Acknowledged by the broker.
    pub delivered: Vec<Event>,
    /// Set aside in the table, each with why, in stream order.
    pub aside: Vec<(Event, Aside)>,
    /// Outages waited out while publishing it.
    pub outages: u64,
    /// The batches read ahead that joined it, in stream order (their
    /// events taken by the lanes, settled above with the rest).
    pub joined: Vec<Joined>,
}

impl Settled {
    /// Takes in one round's settlement: deliveries, and failures set aside
    /// (their aggregates added to `failed`); returns the events not sent
    /// and the outage, if the transport went down.
    fn take(
        &mut self,
        s: Settlement,
        failed: &mut HashSet<String>,
    ) -> (Vec<Event>, Option<String>) {
        self.delivered.extend(s.delivered);
        let delays: HashMap<uuid::Uuid, Duration> =
            s.failures.iter().map(|f| (f.id, f.delay)).collect();
        for (e, error) in s.retried {
            failed.insert(e.aggregate_id.clone());
            let delay = delays.get(&e.id).copied().unwrap_or_default();
            self.aside.push((e, Aside::Retry { error, delay }));
        }
        for (e, error) in s.dead {
            failed.insert(e.aggregate_id.clone());
            self.aside.push((e, Aside::Dead { error }));
        }
        (s.unsent, s.outage)
    }

    /// Adds events dead on arrival (never published), each with why, in
    /// stream order among the rest.
    pub(crate) fn add_dead(&mut self, dead: Vec<(Event, String)>) {
        if dead.is_empty() {
            return;
        }
        self.aside.extend(
            dead.into_iter()
                .map(|(e, error)| (e, Aside::Dead { error })),
        );
        self.aside.sort_by_key(|(e, _)| e.seq);
    }
}

/// Publishes one batch.
pub(crate) struct Publishing<'a> {
    pub core: &'a Core,
    pub outage_backoff_max_ms: u64,
    pub shutdown: &'a mut watch::Receiver<bool>,
    /// Called with each outage's error as it is found.
    pub on_outage: &'a (dyn Fn(&str) + Send + Sync),
}

impl Publishing<'_> {
    /// Publishes `events` (in stream order; `behind` already holds the ones
    /// whose aggregate waits in the table, or whose type is paused). `None`
    /// when the relay was told to stop during an outage: nothing of the
    /// batch may be confirmed.
    ///
    /// With `ahead`, batches read while its calls are in flight join it
    /// ([`super::ahead`]) until the transport goes down.
    pub(crate) async fn batch(
        &mut self,
        events: Vec<Event>,
        behind: Vec<Event>,
        ahead: Option<Reading<'_>>,
    ) -> Option<Settled> {
        let mut settled = Settled::default();
        // Aggregates whose events must now wait in the table, in order.
        let mut failed: HashSet<String> = behind.iter().map(|e| e.aggregate_id.clone()).collect();
        settled
            .aside
            .extend(behind.into_iter().map(|e| (e, Aside::Behind)));
        let mut todo = events;
        let mut ahead = ahead;
        let mut wait = DoublingDelay::new(100, self.outage_backoff_max_ms);
        while !todo.is_empty() {
            let mut s = Settlement::default();
            let mut behind = Vec::new();
            let joined = &mut settled.joined;
            let (left, _) = self
                .core
                .deliver_joined(
                    &mut s,
                    todo,
                    ahead.take(),
                    |read| match read {
                        Read::Joins(mut part, more) => {
                            let events = std::mem::take(&mut part.events);
                            joined.push(part);
                            (events, more.map(ReadAhead::start))
                        }
                        Read::Ends => (Vec::new(), None),
                    },
                    |_, group| {
                        let (held, send): (Vec<Event>, Vec<Event>) = group
                            .into_iter()
                            .partition(|e| failed.contains(&e.aggregate_id));
                        behind.extend(held);
                        send
                    },
                )
                .await;
            settled
                .aside
                .extend(behind.into_iter().map(|e| (e, Aside::Behind)));
            let (mut unsent, outage) = settled.take(s, &mut failed);
            // Left over: behind an event set aside (its aggregate failed),
            // or not sent for the outage (sent again after it).
            for e in left {
                if failed.contains(&e.aggregate_id) {
                    settled.aside.push((e, Aside::Behind));
                } else {
                    unsent.push(e);
                }
            }
            let Some(error) = outage else {
                // Without an outage every lane ends delivered or behind a
                // failure; anything else still goes to the table, never
                // past the slot unpublished.
                settled
                    .aside
                    .extend(unsent.into_iter().map(|e| (e, Aside::Behind)));
                break;
            };
            settled.outages += 1;
            (self.on_outage)(&error);
            unsent.sort_by_key(|e| e.seq);
            todo = unsent;
            let pause = wait.next_delay();
            tracing::warn!(%error, events = todo.len(), wait_ms = pause.as_millis() as u64, "broker unavailable; the slot holds the events, no attempt counted");
            tokio::select! {
                _ = tokio::time::sleep(pause) => {}
                _ = self.shutdown.changed() => return None,
            }
            if *self.shutdown.borrow() {
                return None;
            }
        }
        settled.aside.sort_by_key(|(e, _)| e.seq);
        Some(settled)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::test_event as ev;
    use crate::publisher::Outcome;
    use crate::relay::deliver::outcomes::RetryPolicy;

    const POLICY: RetryPolicy = RetryPolicy {
        max_attempts: 3,
        backoff_base_ms: 100,
        backoff_max_ms: 1_000,
    };

    #[test]
    fn outcomes_map_onto_the_table_modes_rules() {
        let mut s = Settlement::default();
        let mut tired = ev(5, "e");
        tired.attempts = 2;
        s.settle(
            vec![ev(1, "a"), ev(2, "b"), ev(3, "c"), ev(4, "d"), tired],
            vec![
                Outcome::Delivered,
                Outcome::Rejected("big".into()),
                Outcome::Unavailable("down".into()),
                Outcome::RetryAfter("slow".into(), Duration::from_secs(60)),
                Outcome::Retry("again".into()),
            ],
            &POLICY,
        );
        let mut settled = Settled::default();
        let mut failed = HashSet::new();
        let (unsent, outage) = settled.take(s, &mut failed);
        assert_eq!(settled.delivered.len(), 1);
        assert_eq!(unsent.len(), 1, "not sent: sent again after the outage");
        assert_eq!(outage.as_deref(), Some("down"));
        let why: HashMap<&str, &Aside> = settled
            .aside
            .iter()
            .map(|(e, a)| (e.aggregate_id.as_str(), a))
            .collect();
        assert!(matches!(why["b"], Aside::Dead { .. }));
        assert!(matches!(why["e"], Aside::Dead { .. }), "out of attempts");
        match why["d"] {
            Aside::Retry { delay, .. } => assert_eq!(
                *delay,
                Duration::from_millis(1_000),
                "a hint is cut to backoff_max_ms"
            ),
            other => panic!("{other:?}"),
        }
        assert_eq!(failed.len(), 3);
    }
}
