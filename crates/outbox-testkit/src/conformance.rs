//! The publisher conformance suite: what every [`Publisher`] must do against
//! its real broker, checked by reading the messages back from the broker.
//!
//! A publisher's tests implement [`Harness`] (how to build the publisher,
//! how to read messages back, how to stop and start the broker) and call
//! the cases they can run:
//!
//! | case | needs |
//! | --- | --- |
//! | [`delivers_a_batch`] | — |
//! | [`maps_headers_key_and_destination`] | — |
//! | [`keeps_aggregate_order`] | PostgreSQL |
//! | [`drains_a_large_batch`] | PostgreSQL |
//! | [`rejects_an_oversized_message`] | PostgreSQL, [`Capabilities::oversized_payload_bytes`] |
//! | [`outage_burns_no_attempts`] | PostgreSQL, [`Capabilities::stop_start`] |
//! | [`survives_a_broker_restart`] | PostgreSQL, [`Capabilities::keeps_data_across_restart`] |
//!
//! Cases that go through PostgreSQL run a real [`Relay`] on the pool they
//! are given (migrating it first), so they check the publisher and the
//! relay together: outcomes, dead letters, attempts, and what reached the
//! broker. Each case uses its own [`Scope`] (fresh aggregate type, event
//! type and destinations), so cases may share a broker and run in parallel,
//! except those that stop it.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use outbox::{Event, NewEvent, Outbox, Outcome, Publisher, Relay, RelayConfig, RelayHandle};
use serde_json::json;
use sqlx::PgPool;
use uuid::Uuid;

use crate::order::first_delivery_violation;
use crate::wait::wait_until;

/// The header carrying the event id (see [`Event::message_headers`]).
pub const EVENT_ID_HEADER: &str = "outbox-event-id";

/// One message read back from the broker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Received {
    /// Where it was found: the topic, the routing key, …
    pub destination: String,
    /// The message key, for brokers that have one.
    pub key: Option<String>,
    /// The message headers (string values).
    pub headers: BTreeMap<String, String>,
    /// The message body.
    pub payload: Vec<u8>,
}

impl Received {
    /// The event id from the `outbox-event-id` header.
    pub fn event_id(&self) -> Option<Uuid> {
        self.headers
            .get(EVENT_ID_HEADER)
            .and_then(|v| Uuid::parse_str(v).ok())
    }
}

/// How many distinct event ids are among `received`.
pub fn distinct_events(received: &[Received]) -> usize {
    received
        .iter()
        .filter_map(Received::event_id)
        .collect::<HashSet<_>>()
        .len()
}

/// Gathers messages read back, counting distinct events as they come (for
/// [`Harness::consume`] loops).
#[derive(Debug, Default)]
pub struct Collector {
    messages: Vec<Received>,
    ids: HashSet<Uuid>,
}

impl Collector {
    /// An empty collector.
    pub fn new() -> Collector {
        Collector::default()
    }

    /// Adds a message.
    pub fn push(&mut self, message: Received) {
        if let Some(id) = message.event_id() {
            self.ids.insert(id);
        }
        self.messages.push(message);
    }

    /// Distinct event ids so far.
    pub fn distinct(&self) -> usize {
        self.ids.len()
    }

    /// The messages, in the order they were added.
    pub fn into_messages(self) -> Vec<Received> {
        self.messages
    }
}

/// The names one case publishes under, unique per case and run: its events
/// have aggregate type [`Scope::aggregate_type`] and event type
/// [`Scope::event_type`], and some have the topic override
/// [`Scope::override_destination`]. A harness reads back by scope.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scope {
    name: String,
}

impl Scope {
    /// A fresh scope for `case` (letters, digits and `_` only).
    pub fn new(case: &str) -> Scope {
        Scope {
            name: format!("c{:08x}_{case}", rand::random::<u32>()),
        }
    }

    /// The scope's name: `c<random>_<case>`, a valid Kafka topic name and
    /// AMQP routing-key word.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The aggregate type of the scope's events.
    pub fn aggregate_type(&self) -> &str {
        &self.name
    }

    /// The event type of the scope's events: `<name>.happened`.
    pub fn event_type(&self) -> String {
        format!("{}.happened", self.name)
    }

    /// The topic override some events carry: `<name>.override`.
    pub fn override_destination(&self) -> String {
        format!("{}.override", self.name)
    }
}

/// What a harness's broker supports.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Capabilities {
    /// Messages carry a key (Kafka); it must equal the aggregate id.
    pub keyed: bool,
    /// A payload of this many bytes must be refused (by the broker or by a
    /// limit the publisher enforces locally); `None` if there is no limit.
    pub oversized_payload_bytes: Option<usize>,
    /// [`Harness::stop_broker`] and [`Harness::start_broker`] work.
    pub stop_start: bool,
    /// Messages published before a stop are still there after a start.
    pub keeps_data_across_restart: bool,
}

/// A publisher under test, with its broker.
#[async_trait(?Send)]
pub trait Harness {
    /// The publisher type.
    type Publisher: Publisher;

    /// A name for messages, e.g. `kafka (mock cluster)`.
    fn name(&self) -> String;

    /// What the broker supports.
    fn capabilities(&self) -> Capabilities;

    /// A new publisher for the broker.
    async fn publisher(&self) -> Self::Publisher;

    /// Where an event of `scope` without a topic override is published
    /// (the publisher's template applied), as [`Received::destination`]
    /// will show it.
    fn default_destination(&self, scope: &Scope) -> String;

    /// Makes the broker ready to keep `scope`'s messages for
    /// [`Harness::consume`] (create topics, bind a queue). Called before
    /// anything of the scope is published.
    async fn prepare(&self, _scope: &Scope) {}

    /// Reads back the messages published under `scope` (to its default
    /// destination and to its override), in the broker's order for each
    /// aggregate. Returns once `expected` distinct events arrived, or at
    /// `deadline` with what did.
    async fn consume(&self, scope: &Scope, expected: usize, deadline: Duration) -> Vec<Received>;

    /// Takes the broker down (only if [`Capabilities::stop_start`]).
    async fn stop_broker(&self) {
        panic!("{} cannot stop its broker", self.name());
    }

    /// Brings the broker back (only if [`Capabilities::stop_start`]).
    async fn start_broker(&self) {
        panic!("{} cannot start its broker", self.name());
    }
}

/// The relay settings the suite uses: quick polls and backoffs, so
/// failures show within seconds.
pub fn relay_config(batch_size: usize) -> RelayConfig {
    RelayConfig {
        batch_size,
        backoff_base_ms: 50,
        backoff_max_ms: 1_000,
        poll_min_ms: 2,
        poll_max_ms: 50,
        outage_backoff_max_ms: 500,
        listen: false,
        ..RelayConfig::default()
    }
}

/// An event of `scope` for publishing directly (not through a relay): the
/// `n`-th of aggregate `aggregate_id`, with payload
/// `{"aggregate": aggregate_id, "n": n}`.
pub fn event(scope: &Scope, aggregate_id: &str, n: i64) -> Event {
    Event {
        id: Uuid::now_v7(),
        seq: n,
        aggregate_type: scope.aggregate_type().to_owned(),
        aggregate_id: aggregate_id.to_owned(),
        event_type: scope.event_type(),
        payload: json!({"aggregate": aggregate_id, "n": n}).to_string(),
        headers: BTreeMap::new(),
        topic: None,
        attempts: 0,
        created_at: chrono_now(),
        partition: 0,
    }
}

fn chrono_now() -> chrono::DateTime<chrono::Utc> {
    chrono::Utc::now()
}

/// One expected event: its id, aggregate, position in the aggregate and
/// payload.
#[derive(Debug, Clone)]
struct Expected {
    aggregate: String,
    n: i64,
    payload: serde_json::Value,
}

/// Checks what came back: every expected event, nothing else of the scope,
/// payloads intact, first deliveries in order per aggregate.
fn verify(harness: &str, case: &str, expected: &HashMap<Uuid, Expected>, received: &[Received]) {
    let mut seen = HashSet::new();
    let mut order = Vec::with_capacity(received.len());
    for (i, r) in received.iter().enumerate() {
        let id = r.event_id().unwrap_or_else(|| {
            panic!(
                "{harness} / {case}: message {i} has no valid {EVENT_ID_HEADER} header: {:?}",
                r.headers
            )
        });
        let Some(e) = expected.get(&id) else {
            panic!("{harness} / {case}: message {i} is event {id}, which was not expected here (dead-lettered events must not reach the broker)");
        };
        let body: serde_json::Value = serde_json::from_slice(&r.payload).unwrap_or_else(|err| {
            panic!("{harness} / {case}: event {id}: payload is not JSON ({err})")
        });
        assert_eq!(
            body, e.payload,
            "{harness} / {case}: event {id}: payload changed in transit"
        );
        seen.insert(id);
        order.push((e.aggregate.as_str(), e.n));
    }
    let missing: Vec<&Uuid> = expected.keys().filter(|id| !seen.contains(id)).collect();
    assert!(
        missing.is_empty(),
        "{harness} / {case}: {} of {} events never reached the broker (read back {} messages); first missing: {:?}",
        missing.len(),
        expected.len(),
        received.len(),
        missing.iter().take(5).collect::<Vec<_>>()
    );
    if let Some(v) = first_delivery_violation(order) {
        panic!("{harness} / {case}: order broken: {v}");
    }
}

async fn migrate(pool: &PgPool) {
    let mut conn = pool
        .acquire()
        .await
        .expect("connecting to the test database");
    outbox::migrate(
        &mut conn,
        &outbox::Schema::default(),
        &outbox::MigrateOptions::default(),
    )
    .await
    .expect("migrating the test database");
}

/// Enqueues `per_aggregate` events for each of `aggregates` aggregates,
/// interleaved (a0/0, a1/0, …, a0/1, …), in statements of at most 1,000.
async fn enqueue_interleaved(
    pool: &PgPool,
    scope: &Scope,
    prefix: &str,
    aggregates: usize,
    per_aggregate: usize,
) -> HashMap<Uuid, Expected> {
    let mut all = Vec::with_capacity(aggregates * per_aggregate);
    for n in 0..per_aggregate {
        for a in 0..aggregates {
            let agg = format!("{prefix}{a}");
            all.push(new_event(scope, &agg, n as i64, None));
        }
    }
    enqueue(pool, &all).await
}

fn new_event(
    scope: &Scope,
    aggregate: &str,
    n: i64,
    payload: Option<serde_json::Value>,
) -> NewEvent {
    let payload = payload.unwrap_or_else(|| json!({"aggregate": aggregate, "n": n}));
    NewEvent::json(
        scope.aggregate_type(),
        aggregate,
        scope.event_type(),
        payload,
    )
    .header(
        "traceparent",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
    )
}

async fn enqueue(pool: &PgPool, events: &[NewEvent]) -> HashMap<Uuid, Expected> {
    let outbox = Outbox::new();
    for chunk in events.chunks(1_000) {
        outbox
            .enqueue_many(pool, chunk)
            .await
            .expect("enqueueing test events");
    }
    events
        .iter()
        .map(|e| {
            (
                e.id,
                Expected {
                    aggregate: e.aggregate_id.clone(),
                    n: e.payload
                        .get("n")
                        .and_then(serde_json::Value::as_i64)
                        .unwrap_or(-1),
                    payload: e.payload.clone(),
                },
            )
        })
        .collect()
}

async fn pending(pool: &PgPool) -> i64 {
    sqlx::query_scalar(
        "SELECT count(*) FROM outbox_events WHERE processed_at IS NULL AND dead_lettered_at IS NULL",
    )
    .fetch_one(pool)
    .await
    .expect("counting pending events")
}

async fn wait_drained(pool: &PgPool, what: &str, deadline: Duration) {
    wait_until(what, deadline, || {
        let pool = pool.clone();
        async move { pending(&pool).await == 0 }
    })
    .await;
}

/// Dead letters as `(id, attempts, last_error)`.
async fn dead_letters(pool: &PgPool) -> Vec<(Uuid, i32, Option<String>)> {
    sqlx::query_as("SELECT id, attempts, last_error FROM outbox_dead_letters")
        .fetch_all(pool)
        .await
        .expect("reading outbox_dead_letters")
}

async fn spawn_relay<H: Harness>(h: &H, pool: &PgPool, batch_size: usize) -> RelayHandle {
    Relay::builder(pool.clone(), h.publisher().await)
        .config(relay_config(batch_size))
        .spawn()
        .await
        .unwrap_or_else(|e| panic!("{}: starting the relay: {e}", h.name()))
}

fn done(harness: &str, case: &str, started: Instant, detail: &str) {
    eprintln!(
        "conformance {harness}: {case} passed in {:.2?}{}{detail}",
        started.elapsed(),
        if detail.is_empty() { "" } else { "; " }
    );
}

/// Publishes 20 events of 20 aggregates in one call: every outcome must be
/// [`Outcome::Delivered`], and exactly those 20 messages, byte for byte,
/// must be on the broker.
pub async fn delivers_a_batch<H: Harness>(h: &H) {
    let (name, case, started) = (h.name(), "delivers_a_batch", Instant::now());
    let scope = Scope::new("batch");
    h.prepare(&scope).await;
    let batch: Vec<Event> = (0..20)
        .map(|a| event(&scope, &format!("agg{a}"), 0))
        .collect();
    let publisher = h.publisher().await;
    let outcomes = publisher
        .publish(&batch)
        .await
        .unwrap_or_else(|e| panic!("{name} / {case}: publish failed: {e}"));
    assert_eq!(
        outcomes,
        vec![Outcome::Delivered; batch.len()],
        "{name} / {case}: one outcome per event, all delivered"
    );
    publisher.close().await;
    let received = h
        .consume(&scope, batch.len(), Duration::from_secs(30))
        .await;
    assert_eq!(
        received.len(),
        batch.len(),
        "{name} / {case}: one message per event on the broker, no more, no less"
    );
    for e in &batch {
        let r = received
            .iter()
            .find(|r| r.event_id() == Some(e.id))
            .unwrap_or_else(|| panic!("{name} / {case}: event {} is not on the broker", e.id));
        assert_eq!(
            r.payload,
            e.payload.as_bytes(),
            "{name} / {case}: the message body must be the payload's JSON bytes"
        );
    }
    done(&name, case, started, "");
}

/// Checks the message mapping: the four `outbox-*` headers, the producer's
/// headers (`traceparent`, a custom one), the key (= aggregate id) where
/// the broker has keys, the default destination and the topic override.
pub async fn maps_headers_key_and_destination<H: Harness>(h: &H) {
    let (name, case, started) = (h.name(), "maps_headers_key_and_destination", Instant::now());
    let scope = Scope::new("headers");
    h.prepare(&scope).await;
    let mut plain = event(&scope, "order-42", 0);
    plain.headers.insert(
        "traceparent".into(),
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".into(),
    );
    plain.headers.insert("x-tenant".into(), "acme".into());
    let mut routed = event(&scope, "order-43", 0);
    routed.topic = Some(scope.override_destination());
    routed.headers.insert("x-tenant".into(), "globex".into());
    let batch = vec![plain, routed];
    let publisher = h.publisher().await;
    let outcomes = publisher
        .publish(&batch)
        .await
        .unwrap_or_else(|e| panic!("{name} / {case}: publish failed: {e}"));
    assert_eq!(outcomes, vec![Outcome::Delivered; 2], "{name} / {case}");
    publisher.close().await;
    let received = h.consume(&scope, 2, Duration::from_secs(30)).await;
    assert_eq!(
        received.len(),
        2,
        "{name} / {case}: both messages on the broker"
    );
    for e in &batch {
        let r = received
            .iter()
            .find(|r| r.event_id() == Some(e.id))
            .unwrap_or_else(|| panic!("{name} / {case}: event {} is not on the broker", e.id));
        for (k, v) in e.message_headers() {
            assert_eq!(
                r.headers.get(&k),
                Some(&v),
                "{name} / {case}: header {k} of event {} (got {:?})",
                e.id,
                r.headers
            );
        }
        if h.capabilities().keyed {
            assert_eq!(
                r.key.as_deref(),
                Some(e.aggregate_id.as_str()),
                "{name} / {case}: the key is the aggregate id"
            );
        }
        let want = match &e.topic {
            Some(t) => t.clone(),
            None => h.default_destination(&scope),
        };
        assert_eq!(
            r.destination, want,
            "{name} / {case}: destination of event {}",
            e.id
        );
    }
    done(&name, case, started, "");
}

/// 40 aggregates × 25 events, interleaved, through a relay with batches of
/// 100: every event on the broker, and for each aggregate the first
/// deliveries in enqueue order.
pub async fn keeps_aggregate_order<H: Harness>(h: &H, pool: &PgPool) {
    let (name, case, started) = (h.name(), "keeps_aggregate_order", Instant::now());
    migrate(pool).await;
    let scope = Scope::new("order");
    h.prepare(&scope).await;
    let expected = enqueue_interleaved(pool, &scope, "agg", 40, 25).await;
    let relay = spawn_relay(h, pool, 100).await;
    wait_drained(
        pool,
        &format!("{name}: relay to deliver 1,000 events"),
        Duration::from_secs(120),
    )
    .await;
    let stats = relay.stats();
    relay.shutdown().await.expect("relay shutdown");
    assert!(
        dead_letters(pool).await.is_empty(),
        "{name} / {case}: nothing dead-lettered"
    );
    let received = h
        .consume(&scope, expected.len(), Duration::from_secs(60))
        .await;
    verify(&name, case, &expected, &received);
    done(&name, case, started, &format!("{} batches", stats.batches));
}

/// `n` events (250 aggregates) through a relay with batches of 500: all on
/// the broker, in order per aggregate. Reports the throughput.
pub async fn drains_a_large_batch<H: Harness>(h: &H, pool: &PgPool, n: usize) {
    let (name, case, started) = (h.name(), "drains_a_large_batch", Instant::now());
    migrate(pool).await;
    let scope = Scope::new("large");
    h.prepare(&scope).await;
    let aggregates = 250.min(n.max(1));
    let expected =
        enqueue_interleaved(pool, &scope, "agg", aggregates, n.div_ceil(aggregates)).await;
    let relay_started = Instant::now();
    let relay = spawn_relay(h, pool, 500).await;
    wait_drained(
        pool,
        &format!("{name}: relay to deliver {n} events"),
        Duration::from_secs(300),
    )
    .await;
    let drained = relay_started.elapsed();
    relay.shutdown().await.expect("relay shutdown");
    assert!(
        dead_letters(pool).await.is_empty(),
        "{name} / {case}: nothing dead-lettered"
    );
    let received = h
        .consume(&scope, expected.len(), Duration::from_secs(120))
        .await;
    verify(&name, case, &expected, &received);
    done(
        &name,
        case,
        started,
        &format!(
            "{} events drained in {drained:.2?} ({:.0} events/s)",
            expected.len(),
            expected.len() as f64 / drained.as_secs_f64()
        ),
    );
}

/// An event above the broker's size limit is rejected at once: it is
/// dead-lettered after one attempt with an error, never reaches the
/// broker, and every other event (its own aggregate's next one included)
/// is delivered.
pub async fn rejects_an_oversized_message<H: Harness>(h: &H, pool: &PgPool) {
    let (name, case, started) = (h.name(), "rejects_an_oversized_message", Instant::now());
    let Some(bytes) = h.capabilities().oversized_payload_bytes else {
        eprintln!("conformance {name}: {case} not applicable (no size limit)");
        return;
    };
    migrate(pool).await;
    let scope = Scope::new("oversized");
    h.prepare(&scope).await;
    let mut events = Vec::new();
    for n in 0..3 {
        for a in 0..10 {
            events.push(new_event(&scope, &format!("agg{a}"), n, None));
        }
    }
    let blob = "x".repeat(bytes);
    let big = new_event(
        &scope,
        "big",
        0,
        Some(json!({"aggregate": "big", "n": 0, "blob": blob})),
    );
    let big_id = big.id;
    events.push(big);
    events.push(new_event(&scope, "big", 1, None));
    events.push(new_event(&scope, "agg0", 3, None));
    let mut expected = enqueue(pool, &events).await;
    expected.remove(&big_id);
    let relay = spawn_relay(h, pool, 100).await;
    wait_drained(
        pool,
        &format!("{name}: relay to settle every event"),
        Duration::from_secs(120),
    )
    .await;
    let stats = relay.stats();
    relay.shutdown().await.expect("relay shutdown");
    let dead = dead_letters(pool).await;
    assert_eq!(
        dead.len(),
        1,
        "{name} / {case}: exactly the oversized event is dead-lettered: {dead:?}"
    );
    let (id, attempts, error) = &dead[0];
    assert_eq!(
        *id, big_id,
        "{name} / {case}: the dead letter is the oversized event"
    );
    assert_eq!(
        *attempts, 1,
        "{name} / {case}: rejected at the first attempt, not retried"
    );
    assert!(
        error.as_deref().is_some_and(|e| !e.is_empty()),
        "{name} / {case}: the dead letter keeps its error"
    );
    assert_eq!(
        stats.retried, 0,
        "{name} / {case}: a rejection is not a retry ({stats:?})"
    );
    let received = h
        .consume(&scope, expected.len(), Duration::from_secs(60))
        .await;
    verify(&name, case, &expected, &received);
    done(
        &name,
        case,
        started,
        &format!("error: {}", error.as_deref().unwrap_or("")),
    );
}

/// With the broker down, a publish is a transport outage
/// ([`outbox::Unavailable`]): the relay keeps trying without counting
/// attempts or dead-lettering anything, and delivers everything once the
/// broker is back.
pub async fn outage_burns_no_attempts<H: Harness>(h: &H, pool: &PgPool) {
    let (name, case, started) = (h.name(), "outage_burns_no_attempts", Instant::now());
    if !h.capabilities().stop_start {
        eprintln!("conformance {name}: {case} not applicable (cannot stop the broker)");
        return;
    }
    migrate(pool).await;
    let scope = Scope::new("outage");
    h.prepare(&scope).await;
    h.stop_broker().await;
    let stopped = Instant::now();

    // A direct publish says "unavailable", not "failed event".
    let probe = h.publisher().await;
    let outcome = tokio::time::timeout(
        Duration::from_secs(60),
        probe.publish(&[event(&Scope::new("probe"), "probe", 0)]),
    )
    .await
    .unwrap_or_else(|_| {
        panic!("{name} / {case}: publish with the broker down did not return within 60 s")
    });
    match outcome {
        Err(e) => assert!(!e.message.is_empty(), "{name} / {case}: the outage says what failed"),
        Ok(outcomes) => panic!(
            "{name} / {case}: with the broker down, publish must return Err(Unavailable), not per-event outcomes {outcomes:?}"
        ),
    }
    assert!(
        probe.health().await.is_err(),
        "{name} / {case}: the health check must fail while the broker is down"
    );
    drop(probe);

    let expected = enqueue_interleaved(pool, &scope, "agg", 20, 10).await;
    let relay = spawn_relay(h, pool, 100).await;
    wait_until(
        &format!("{name}: the relay to meet the outage 3 times"),
        Duration::from_secs(120),
        || {
            let outages = relay.stats().outages;
            async move { outages >= 3 }
        },
    )
    .await;
    let (max_attempts, still_pending): (Option<i32>, i64) = sqlx::query_as(
        "SELECT max(attempts), count(*) FILTER (WHERE processed_at IS NULL AND dead_lettered_at IS NULL) FROM outbox_events",
    )
    .fetch_one(pool)
    .await
    .expect("reading attempts");
    assert_eq!(
        max_attempts,
        Some(0),
        "{name} / {case}: an outage must not count attempts"
    );
    assert_eq!(
        still_pending,
        expected.len() as i64,
        "{name} / {case}: nothing delivered while down"
    );
    assert!(
        dead_letters(pool).await.is_empty(),
        "{name} / {case}: nothing dead-lettered by an outage"
    );
    let stats = relay.stats();
    assert_eq!(
        (stats.delivered, stats.retried, stats.dead_lettered),
        (0, 0, 0),
        "{name} / {case}: {stats:?}"
    );

    let down_for = stopped.elapsed();
    h.start_broker().await;
    wait_drained(
        pool,
        &format!("{name}: delivery to resume after the broker returned"),
        Duration::from_secs(180),
    )
    .await;
    let stats = relay.stats();
    relay.shutdown().await.expect("relay shutdown");
    assert!(
        dead_letters(pool).await.is_empty(),
        "{name} / {case}: nothing dead-lettered"
    );
    let received = h
        .consume(&scope, expected.len(), Duration::from_secs(60))
        .await;
    verify(&name, case, &expected, &received);
    done(
        &name,
        case,
        started,
        &format!(
            "{} outages while down for {down_for:.2?}, {} retried",
            stats.outages, stats.retried
        ),
    );
}

/// A producer keeps writing while the relay publishes; the broker is killed
/// in the middle and started again. Nothing is lost, nothing is
/// dead-lettered, and first deliveries stay in order per aggregate.
pub async fn survives_a_broker_restart<H: Harness>(h: &H, pool: &PgPool) {
    let (name, case, started) = (h.name(), "survives_a_broker_restart", Instant::now());
    if !h.capabilities().keeps_data_across_restart {
        eprintln!(
            "conformance {name}: {case} not applicable (the broker loses its data on restart)"
        );
        return;
    }
    migrate(pool).await;
    let scope = Scope::new("restart");
    h.prepare(&scope).await;

    let stop = Arc::new(AtomicBool::new(false));
    let producer = tokio::spawn({
        let (pool, scope, stop) = (pool.clone(), scope.clone(), stop.clone());
        async move {
            let mut expected = HashMap::new();
            let mut n = 0_i64;
            while !stop.load(Ordering::SeqCst) {
                let chunk: Vec<NewEvent> = (0..20)
                    .map(|a| new_event(&scope, &format!("agg{a}"), n, None))
                    .collect();
                expected.extend(enqueue(&pool, &chunk).await);
                n += 1;
                // Paces the load (about 1,000 events/s); no test step waits on it.
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            expected
        }
    });
    let relay = spawn_relay(h, pool, 100).await;
    let delivered_at_least = |n: u64| {
        let relay = &relay;
        move || {
            let d = relay.stats().delivered;
            async move { d >= n }
        }
    };
    wait_until(
        &format!("{name}: 500 deliveries before the restart"),
        Duration::from_secs(120),
        delivered_at_least(500),
    )
    .await;
    let outages_before = relay.stats().outages;
    h.stop_broker().await;
    let at_stop = relay.stats().delivered;
    wait_until(
        &format!("{name}: the relay to notice the broker is gone"),
        Duration::from_secs(120),
        || {
            let o = relay.stats().outages;
            async move { o > outages_before }
        },
    )
    .await;
    h.start_broker().await;
    wait_until(
        &format!("{name}: 500 more deliveries after the restart"),
        Duration::from_secs(180),
        delivered_at_least(at_stop + 500),
    )
    .await;
    stop.store(true, Ordering::SeqCst);
    let expected = producer.await.expect("producer task");
    wait_drained(
        pool,
        &format!("{name}: relay to deliver everything"),
        Duration::from_secs(180),
    )
    .await;
    let stats = relay.stats();
    relay.shutdown().await.expect("relay shutdown");
    let dead = dead_letters(pool).await;
    assert!(
        dead.is_empty(),
        "{name} / {case}: a broker restart dead-lettered events: {dead:?}"
    );
    let received = h
        .consume(&scope, expected.len(), Duration::from_secs(120))
        .await;
    verify(&name, case, &expected, &received);
    done(
        &name,
        case,
        started,
        &format!(
            "{} events, {} messages read back ({} duplicates), {} outages, {} retried",
            expected.len(),
            received.len(),
            received.len() - expected.len(),
            stats.outages,
            stats.retried
        ),
    );
}
