//! A publisher for tests: records every delivery in order and fails on
//! command (per event, per aggregate, or the whole transport).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use outbox::{Event, Outcome, Publisher, Unavailable};
use uuid::Uuid;

/// How a matching event fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fail {
    /// A transient failure ([`Outcome::Retry`]).
    Retry,
    /// A permanent rejection ([`Outcome::Rejected`]).
    Reject,
    /// The transport failed for this event only ([`Outcome::Unavailable`]).
    Unavailable,
}

/// Which events a failure rule applies to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Match {
    /// Every event of this aggregate.
    Aggregate(String),
    /// This event.
    Id(Uuid),
    /// Every event of this type.
    EventType(String),
}

impl Match {
    fn hits(&self, e: &Event) -> bool {
        match self {
            Match::Aggregate(a) => &e.aggregate_id == a,
            Match::Id(id) => &e.id == id,
            Match::EventType(t) => &e.event_type == t,
        }
    }
}

#[derive(Debug)]
struct Rule {
    matcher: Match,
    fail: Fail,
    remaining: Option<u32>,
}

/// One publish attempt of one event, as seen by the publisher.
#[derive(Debug, Clone)]
pub struct Attempt {
    /// The event.
    pub id: Uuid,
    /// Its aggregate.
    pub aggregate_id: String,
    /// When the relay handed it over.
    pub at: Instant,
    /// What the publisher answered.
    pub outcome: Outcome,
}

#[derive(Debug, Default)]
struct Inner {
    delivered: Mutex<Vec<Event>>,
    attempts: Mutex<Vec<Attempt>>,
    rules: Mutex<Vec<Rule>>,
    down: AtomicBool,
    unavailable_calls: AtomicU64,
    calls: AtomicU64,
    latency: Mutex<Duration>,
    max_batch_seen: AtomicU64,
    same_aggregate_in_batch: AtomicBool,
    /// [`Publisher::concurrent_calls`]; 0 reads as the default, 1.
    concurrent_calls: std::sync::atomic::AtomicUsize,
    /// An aggregate whose events take this long to publish.
    slow: Mutex<Option<(String, Duration)>>,
    /// The aggregates of the calls in flight, and whether a call ever
    /// started with an event of an aggregate already in flight.
    in_flight: Mutex<Vec<String>>,
    overlapped: AtomicBool,
    open_calls: AtomicU64,
    most_calls_in_flight: AtomicU64,
}

/// Records deliveries in order; fails on command. Clones share state, so
/// keep one clone in the test and give another to the relay.
#[derive(Debug, Clone, Default)]
pub struct TestPublisher {
    inner: Arc<Inner>,
}

impl TestPublisher {
    /// A publisher that delivers everything.
    pub fn new() -> Self {
        Self::default()
    }

    /// Makes matching events fail; `times: None` means forever.
    pub fn fail(&self, matcher: Match, fail: Fail, times: Option<u32>) {
        self.inner.rules.lock().unwrap().push(Rule {
            matcher,
            fail,
            remaining: times,
        });
    }

    /// Removes every failure rule.
    pub fn heal(&self) {
        self.inner.rules.lock().unwrap().clear();
    }

    /// Takes the whole transport down (every call returns
    /// [`Unavailable`]) or brings it back.
    pub fn set_down(&self, down: bool) {
        self.inner.down.store(down, Ordering::SeqCst);
    }

    /// Adds a delay to every publish call.
    pub fn set_latency(&self, latency: Duration) {
        *self.inner.latency.lock().unwrap() = latency;
    }

    /// Lets the relay have up to `n` publish calls in flight
    /// ([`Publisher::concurrent_calls`]).
    pub fn set_concurrent_calls(&self, n: usize) {
        self.inner.concurrent_calls.store(n, Ordering::SeqCst);
    }

    /// Makes every call holding an event of `aggregate` take `latency`.
    pub fn set_slow_aggregate(&self, aggregate: &str, latency: Duration) {
        *self.inner.slow.lock().unwrap() = Some((aggregate.to_owned(), latency));
    }

    /// Whether a call ever started with an event of an aggregate that an
    /// unfinished call held: two events of one aggregate in flight at once.
    pub fn saw_one_aggregate_twice_in_flight(&self) -> bool {
        self.inner.overlapped.load(Ordering::SeqCst)
    }

    /// The most calls in flight at once.
    pub fn most_calls_in_flight(&self) -> u64 {
        self.inner.most_calls_in_flight.load(Ordering::SeqCst)
    }

    /// Every delivered event, in delivery order (duplicates included).
    pub fn deliveries(&self) -> Vec<Event> {
        self.inner.delivered.lock().unwrap().clone()
    }

    /// How many deliveries so far (duplicates included).
    pub fn delivered_count(&self) -> usize {
        self.inner.delivered.lock().unwrap().len()
    }

    /// Every attempt so far.
    pub fn attempts(&self) -> Vec<Attempt> {
        self.inner.attempts.lock().unwrap().clone()
    }

    /// Calls answered with [`Unavailable`].
    pub fn unavailable_calls(&self) -> u64 {
        self.inner.unavailable_calls.load(Ordering::SeqCst)
    }

    /// Publish calls so far.
    pub fn calls(&self) -> u64 {
        self.inner.calls.load(Ordering::SeqCst)
    }

    /// Largest batch seen.
    pub fn max_batch_seen(&self) -> u64 {
        self.inner.max_batch_seen.load(Ordering::SeqCst)
    }

    /// Whether any batch held two events of one aggregate (a contract
    /// breach by the relay).
    pub fn saw_same_aggregate_in_batch(&self) -> bool {
        self.inner.same_aggregate_in_batch.load(Ordering::SeqCst)
    }

    fn outcome_for(&self, e: &Event) -> Outcome {
        let mut rules = self.inner.rules.lock().unwrap();
        for rule in rules.iter_mut() {
            if rule.matcher.hits(e) && rule.remaining != Some(0) {
                if let Some(n) = rule.remaining.as_mut() {
                    *n -= 1;
                }
                return match rule.fail {
                    Fail::Retry => Outcome::Retry(format!("test failure for {}", e.id)),
                    Fail::Reject => Outcome::Rejected(format!("test rejection of {}", e.id)),
                    Fail::Unavailable => {
                        Outcome::Unavailable(format!("test transport failure for {}", e.id))
                    }
                };
            }
        }
        Outcome::Delivered
    }
}

#[async_trait]
impl Publisher for TestPublisher {
    fn name(&self) -> &str {
        "test"
    }

    fn concurrent_calls(&self) -> usize {
        self.inner.concurrent_calls.load(Ordering::SeqCst).max(1)
    }

    async fn publish(&self, batch: &[Event]) -> Result<Vec<Outcome>, Unavailable> {
        self.inner.calls.fetch_add(1, Ordering::SeqCst);
        self.inner
            .max_batch_seen
            .fetch_max(batch.len() as u64, Ordering::SeqCst);
        let aggregates: Vec<String> = batch.iter().map(|e| e.aggregate_id.clone()).collect();
        {
            let mut in_flight = self.inner.in_flight.lock().unwrap();
            if aggregates.iter().any(|a| in_flight.contains(a)) {
                self.inner.overlapped.store(true, Ordering::SeqCst);
            }
            in_flight.extend(aggregates.iter().cloned());
            let open = self.inner.open_calls.fetch_add(1, Ordering::SeqCst) + 1;
            self.inner
                .most_calls_in_flight
                .fetch_max(open, Ordering::SeqCst);
        }
        let result = self.publish_now(batch).await;
        self.inner.open_calls.fetch_sub(1, Ordering::SeqCst);
        let mut in_flight = self.inner.in_flight.lock().unwrap();
        for a in &aggregates {
            if let Some(i) = in_flight.iter().position(|x| x == a) {
                in_flight.swap_remove(i);
            }
        }
        result
    }
}

impl TestPublisher {
    async fn publish_now(&self, batch: &[Event]) -> Result<Vec<Outcome>, Unavailable> {
        let mut latency = *self.inner.latency.lock().unwrap();
        if let Some((agg, slow)) = self.inner.slow.lock().unwrap().clone() {
            if batch.iter().any(|e| e.aggregate_id == agg) {
                latency = latency.max(slow);
            }
        }
        if !latency.is_zero() {
            tokio::time::sleep(latency).await;
        }
        if self.inner.down.load(Ordering::SeqCst) {
            self.inner.unavailable_calls.fetch_add(1, Ordering::SeqCst);
            return Err(Unavailable::new("test transport is down"));
        }
        let mut seen: HashMap<&str, ()> = HashMap::new();
        for e in batch {
            if seen.insert(e.aggregate_id.as_str(), ()).is_some() {
                self.inner
                    .same_aggregate_in_batch
                    .store(true, Ordering::SeqCst);
            }
        }
        let now = Instant::now();
        let mut outcomes = Vec::with_capacity(batch.len());
        let mut attempts = Vec::with_capacity(batch.len());
        let mut delivered = Vec::new();
        for e in batch {
            let o = self.outcome_for(e);
            attempts.push(Attempt {
                id: e.id,
                aggregate_id: e.aggregate_id.clone(),
                at: now,
                outcome: o.clone(),
            });
            if o == Outcome::Delivered {
                delivered.push(e.clone());
            }
            outcomes.push(o);
        }
        self.inner.attempts.lock().unwrap().extend(attempts);
        self.inner.delivered.lock().unwrap().extend(delivered);
        Ok(outcomes)
    }
}
