//! One batch of the WAL stream, published: in per-aggregate waves as the
//! table mode publishes, through the same publisher, with the same retry
//! policy. A pure decision per outcome ([`decide`]) and the rounds around
//! it: a transport outage sends the unsent rest again after a wait, with no
//! attempt counted, until it passes or the relay stops.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use super::set_aside::Aside;
use crate::event::Event;
use crate::publisher::{Outcome, Publisher};
use crate::relay::backoff::DoublingDelay;
use crate::relay::outcomes::RetryPolicy;
use crate::relay::waves::into_waves;

/// What a batch came to.
#[derive(Debug, Default)]
pub(crate) struct Settled {
    /// Acknowledged by the broker.
    pub delivered: Vec<Event>,
    /// Set aside in the table, each with why, in stream order.
    pub aside: Vec<(Event, Aside)>,
    /// Outages waited out while publishing it.
    pub outages: u64,
}

impl Settled {
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

/// What one outcome means for its event.
#[derive(Debug, PartialEq)]
pub(crate) enum Decision {
    /// Done.
    Delivered,
    /// Into the table, retried or dead.
    Aside(Aside),
    /// Not sent: the transport is down; sent again after the outage.
    Unsent(String),
}

/// The relay's decision for one event's outcome (the table mode's rules:
/// `crate::relay::outcomes`).
pub(crate) fn decide(event: &Event, outcome: Outcome, policy: &RetryPolicy) -> Decision {
    let retry = |error: String, hint: Duration| match policy.next_attempt(event.attempts, hint) {
        (_, true) => Decision::Aside(Aside::Dead { error }),
        (delay, false) => Decision::Aside(Aside::Retry { error, delay }),
    };
    match outcome {
        Outcome::Delivered => Decision::Delivered,
        Outcome::Retry(error) => retry(error, Duration::ZERO),
        Outcome::RetryAfter(error, hint) => retry(error, hint),
        Outcome::Rejected(error) => Decision::Aside(Aside::Dead { error }),
        Outcome::Unavailable(error) => Decision::Unsent(error),
    }
}

/// Publishes one batch.
pub(crate) struct Publishing<'a> {
    pub publisher: &'a Arc<dyn Publisher>,
    pub policy: RetryPolicy,
    pub timeout: Duration,
    pub outage_backoff_max_ms: u64,
    pub shutdown: &'a mut watch::Receiver<bool>,
    /// Called with each outage's error as it is found.
    pub on_outage: &'a (dyn Fn(&str) + Send + Sync),
}

impl Publishing<'_> {
    /// Publishes `events` (in stream order; `behind` already holds the ones
    /// whose aggregate waits in the table). `None` when the relay was told
    /// to stop during an outage: nothing of the batch may be confirmed.
    pub(crate) async fn batch(
        &mut self,
        events: Vec<Event>,
        behind: Vec<Event>,
    ) -> Option<Settled> {
        let mut settled = Settled::default();
        // Aggregates whose events must now wait in the table, in order.
        let mut failed: HashSet<String> = behind.iter().map(|e| e.aggregate_id.clone()).collect();
        settled
            .aside
            .extend(behind.into_iter().map(|e| (e, Aside::Behind)));
        let mut todo = events;
        let mut wait = DoublingDelay::new(100, self.outage_backoff_max_ms);
        while !todo.is_empty() {
            let mut unsent: Vec<Event> = Vec::new();
            let mut outage: Option<String> = None;
            for wave in into_waves(todo) {
                let mut send = Vec::with_capacity(wave.len());
                for e in wave {
                    if outage.is_some() || unsent.iter().any(|u| u.aggregate_id == e.aggregate_id) {
                        unsent.push(e);
                    } else if failed.contains(&e.aggregate_id) {
                        settled.aside.push((e, Aside::Behind));
                    } else {
                        send.push(e);
                    }
                }
                if send.is_empty() {
                    continue;
                }
                let outcomes = match self.send(&send).await {
                    Ok(outcomes) => outcomes,
                    Err(error) => {
                        outage = Some(error);
                        unsent.extend(send);
                        continue;
                    }
                };
                let n = send.len();
                let mut outcomes = outcomes.into_iter();
                for e in send {
                    let outcome = outcomes.next().unwrap_or_else(|| {
                        Outcome::Retry(format!("publisher returned no outcome ({n} events sent)"))
                    });
                    match decide(&e, outcome, &self.policy) {
                        Decision::Delivered => settled.delivered.push(e),
                        Decision::Aside(why) => {
                            failed.insert(e.aggregate_id.clone());
                            settled.aside.push((e, why));
                        }
                        Decision::Unsent(error) => {
                            outage.get_or_insert(error);
                            unsent.push(e);
                        }
                    }
                }
            }
            let Some(error) = outage else { break };
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

    async fn send(&self, wave: &[Event]) -> Result<Vec<Outcome>, String> {
        match tokio::time::timeout(self.timeout, self.publisher.publish(wave)).await {
            Err(_) => Err(format!(
                "publish timed out after {} ms",
                self.timeout.as_millis()
            )),
            Ok(Err(e)) => Err(e.message),
            Ok(Ok(outcomes)) => Ok(outcomes),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::test_event as ev;

    const POLICY: RetryPolicy = RetryPolicy {
        max_attempts: 3,
        backoff_base_ms: 100,
        backoff_max_ms: 1_000,
    };

    #[test]
    fn outcomes_map_onto_the_table_modes_rules() {
        let e = ev(1, "a");
        assert_eq!(decide(&e, Outcome::Delivered, &POLICY), Decision::Delivered);
        assert!(matches!(
            decide(&e, Outcome::Rejected("big".into()), &POLICY),
            Decision::Aside(Aside::Dead { .. })
        ));
        assert!(matches!(
            decide(&e, Outcome::Unavailable("down".into()), &POLICY),
            Decision::Unsent(_)
        ));
        match decide(
            &e,
            Outcome::RetryAfter("slow".into(), Duration::from_secs(60)),
            &POLICY,
        ) {
            Decision::Aside(Aside::Retry { delay, .. }) => {
                assert_eq!(
                    delay,
                    Duration::from_millis(1_000),
                    "a hint is cut to backoff_max_ms"
                )
            }
            other => panic!("{other:?}"),
        }
        let mut tired = ev(2, "a");
        tired.attempts = 2;
        assert!(matches!(
            decide(&tired, Outcome::Retry("again".into()), &POLICY),
            Decision::Aside(Aside::Dead { .. })
        ));
    }
}
