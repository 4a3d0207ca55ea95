//! The publisher conformance suite for [`KafkaPublisher`].
//!
//! Every run: against librdkafka's mock cluster (in-process, starts in about
//! a millisecond, can take its broker down and up).
//!
//! And against a real Kafka-protocol broker (tansu): `scripts/test` builds
//! it once and points `OUTBOX_TANSU_BIN` at it. Without it these tests fail,
//! saying how to build it, unless `OUTBOX_SKIP_BROKER_TESTS=kafka-real`
//! (see `docs/publishers.md`).
//!
//! Longer than most files: the mock cluster and a real Kafka-protocol broker
//! run the same suite from one harness.
#![cfg(feature = "kafka")]

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use outbox::{Outcome, Publisher};
use outbox_publishers::kafka::{KafkaConfig, KafkaPublisher};
use outbox_testkit::brokers::kafka::Tansu;
use outbox_testkit::conformance::{self, Capabilities, Collector, Harness, Received, Scope};
use outbox_testkit::postgres::test_db;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Headers, Message};
use rdkafka::mocking::MockCluster;
use rdkafka::producer::DefaultProducerContext;
use rdkafka::{Offset, TopicPartitionList};

/// librdkafka's default `message.max.bytes`: a larger message is refused.
const MESSAGE_MAX_BYTES: usize = 1_000_000;
const PARTITIONS: i32 = 4;

enum Broker {
    Mock(MockCluster<'static, DefaultProducerContext>),
    Tansu(Arc<Mutex<Tansu>>),
}

struct KafkaHarness {
    broker: Broker,
    bootstrap: String,
    prepared: Mutex<Vec<Scope>>,
}

impl KafkaHarness {
    fn mock() -> KafkaHarness {
        let mock = MockCluster::new(1).expect("starting librdkafka's mock cluster");
        KafkaHarness {
            bootstrap: mock.bootstrap_servers(),
            broker: Broker::Mock(mock),
            prepared: Mutex::new(Vec::new()),
        }
    }

    async fn tansu() -> Option<KafkaHarness> {
        let tansu = Tansu::start_or_skip_blocking().await?;
        eprintln!("tansu ready in {:.2?}", tansu.last_start_duration());
        Some(KafkaHarness {
            bootstrap: tansu.bootstrap(),
            broker: Broker::Tansu(Arc::new(Mutex::new(tansu))),
            prepared: Mutex::new(Vec::new()),
        })
    }

    fn config(&self) -> KafkaConfig {
        KafkaConfig {
            brokers: vec![self.bootstrap.clone()],
            message_timeout_ms: 5_000,
            health_timeout_ms: 1_000,
            ..KafkaConfig::default()
        }
    }

    fn topics(&self, scope: &Scope) -> [String; 2] {
        [
            self.default_destination(scope),
            scope.override_destination(),
        ]
    }

    async fn create_topics(&self, scope: &Scope) {
        let topics = self.topics(scope);
        match &self.broker {
            Broker::Mock(mock) => {
                for t in &topics {
                    mock.create_topic(t, PARTITIONS, 1)
                        .expect("creating a mock topic");
                }
            }
            Broker::Tansu(_) => {
                let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
                    .set("bootstrap.servers", &self.bootstrap)
                    .create()
                    .expect("admin client");
                let new: Vec<NewTopic<'_>> = topics
                    .iter()
                    .map(|t| NewTopic::new(t, PARTITIONS, TopicReplication::Fixed(1)))
                    .collect();
                let opts = AdminOptions::new().operation_timeout(Some(Duration::from_secs(10)));
                let results = admin
                    .create_topics(&new, &opts)
                    .await
                    .expect("creating topics");
                for r in results {
                    if let Err((topic, code)) = r {
                        assert_eq!(
                            code,
                            rdkafka::error::RDKafkaErrorCode::TopicAlreadyExists,
                            "creating topic {topic}"
                        );
                    }
                }
            }
        }
    }
}

#[async_trait(?Send)]
impl Harness for KafkaHarness {
    type Publisher = KafkaPublisher;

    fn name(&self) -> String {
        match self.broker {
            Broker::Mock(_) => "kafka (mock cluster)".into(),
            Broker::Tansu(_) => "kafka (tansu)".into(),
        }
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            keyed: true,
            oversized_payload_bytes: Some(MESSAGE_MAX_BYTES + 100_000),
            stop_start: true,
            // tansu runs on memory storage here: a restart empties it.
            keeps_data_across_restart: matches!(self.broker, Broker::Mock(_)),
        }
    }

    async fn publisher(&self) -> KafkaPublisher {
        KafkaPublisher::new(self.config()).expect("kafka publisher")
    }

    fn default_destination(&self, scope: &Scope) -> String {
        format!("outbox.event.{}", scope.aggregate_type())
    }

    async fn prepare(&self, scope: &Scope) {
        self.create_topics(scope).await;
        self.prepared.lock().unwrap().push(scope.clone());
    }

    async fn consume(&self, scope: &Scope, expected: usize, deadline: Duration) -> Vec<Received> {
        let topics = self.topics(scope);
        let bootstrap = self.bootstrap.clone();
        tokio::task::spawn_blocking(move || read_back(&bootstrap, &topics, expected, deadline))
            .await
            .expect("consumer task")
    }

    async fn stop_broker(&self) {
        match &self.broker {
            Broker::Mock(mock) => mock.broker_down(1).expect("mock broker down"),
            Broker::Tansu(t) => on_tansu(t, Tansu::stop).await,
        }
    }

    async fn start_broker(&self) {
        match &self.broker {
            Broker::Mock(mock) => mock.broker_up(1).expect("mock broker up"),
            Broker::Tansu(t) => {
                on_tansu(t, Tansu::start_again)
                    .await
                    .unwrap_or_else(|e| panic!("{e}"));
                // Memory storage: the topics are gone with the old process.
                let scopes = self.prepared.lock().unwrap().clone();
                for s in &scopes {
                    self.create_topics(s).await;
                }
            }
        }
    }
}

/// Runs `f` on the tansu process on a blocking thread (starting and
/// stopping it waits on the process), so the test's runtime keeps running.
async fn on_tansu<R: Send + 'static>(
    tansu: &Arc<Mutex<Tansu>>,
    f: impl FnOnce(&mut Tansu) -> R + Send + 'static,
) -> R {
    let tansu = tansu.clone();
    tokio::task::spawn_blocking(move || f(&mut tansu.lock().unwrap()))
        .await
        .unwrap()
}

/// Reads every partition of `topics` from the beginning until `expected`
/// distinct events arrived or `deadline` passed.
fn read_back(
    bootstrap: &str,
    topics: &[String],
    expected: usize,
    deadline: Duration,
) -> Vec<Received> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", format!("conformance-{:08x}", rand_u32()))
        .set("enable.auto.commit", "false")
        .set("auto.offset.reset", "earliest")
        .create()
        .expect("kafka consumer");
    let mut assignment = TopicPartitionList::new();
    for topic in topics {
        let metadata = consumer
            .fetch_metadata(Some(topic), Duration::from_secs(10))
            .expect("topic metadata");
        for t in metadata.topics() {
            for p in t.partitions() {
                assignment
                    .add_partition_offset(t.name(), p.id(), Offset::Beginning)
                    .expect("assignment");
            }
        }
    }
    consumer.assign(&assignment).expect("assigning partitions");
    let end = Instant::now() + deadline;
    let mut out = Collector::new();
    while Instant::now() < end && out.distinct() < expected {
        match consumer.poll(Duration::from_millis(100)) {
            None => {}
            Some(Err(e)) => eprintln!("consumer: {e}"),
            Some(Ok(m)) => {
                let mut headers = BTreeMap::new();
                if let Some(h) = m.headers() {
                    for header in h.iter() {
                        let value = header
                            .value
                            .map(|v| String::from_utf8_lossy(v).into_owned());
                        headers.insert(header.key.to_owned(), value.unwrap_or_default());
                    }
                }
                out.push(Received {
                    destination: m.topic().to_owned(),
                    key: m.key().map(|k| String::from_utf8_lossy(k).into_owned()),
                    headers,
                    payload: m.payload().unwrap_or_default().to_vec(),
                });
            }
        }
    }
    if out.distinct() < expected {
        // Say what the broker holds, to tell loss from a slow read.
        for topic in topics {
            for p in 0..PARTITIONS {
                let marks = consumer.fetch_watermarks(topic, p, Duration::from_secs(5));
                eprintln!("read back incomplete: {topic}/{p} watermarks {marks:?}");
            }
        }
    }
    out.into_messages()
}

fn rand_u32() -> u32 {
    uuid::Uuid::new_v4().as_u128() as u32
}

// ---- against the mock cluster (every run) ----

/// The suite, each test on a mock cluster of its own.
mod mock {
    use super::*;

    outbox_testkit::conformance_suite! {
        shared: Some(KafkaHarness::mock()),
        private: Some(KafkaHarness::mock()),
        faithful_up_to: Some(MESSAGE_MAX_BYTES - 10_000),
    }
}

/// Kafka-specific: an override that is not a legal topic name is rejected
/// without touching the broker; the rest of the batch is delivered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mock_invalid_topic_is_rejected_alone() {
    let h = KafkaHarness::mock();
    let scope = Scope::new("badtopic");
    h.prepare(&scope).await;
    let good = conformance::event(&scope, "a", 0);
    let mut bad = conformance::event(&scope, "b", 0);
    bad.topic = Some("not a topic!".into());
    let p = h.publisher().await;
    let outcomes = p.publish(&[good.clone(), bad]).await.expect("publish");
    assert_eq!(outcomes[0], Outcome::Delivered);
    match &outcomes[1] {
        Outcome::Rejected(why) => assert!(why.contains("not a topic!"), "{why}"),
        other => panic!("an invalid topic must be rejected, got {other:?}"),
    }
    let got = h.consume(&scope, 1, Duration::from_secs(10)).await;
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].event_id(), Some(good.id));
}

/// Kafka-specific: the health check follows the broker.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mock_health_follows_the_broker() {
    let h = KafkaHarness::mock();
    let p = h.publisher().await;
    p.health().await.expect("healthy while the broker is up");
    h.stop_broker().await;
    let e = p
        .health()
        .await
        .expect_err("unhealthy while the broker is down");
    assert!(e.message.contains(&h.bootstrap), "{e}");
    h.start_broker().await;
    let started = Instant::now();
    while p.health().await.is_err() {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "healthy again once the broker is back"
        );
    }
}

// ---- against tansu, a real Kafka-protocol broker (OUTBOX_TANSU_BIN; scripts/test
// builds it; OUTBOX_SKIP_BROKER_TESTS=kafka-real skips these) ----

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tansu_delivers_a_batch_and_maps_headers() {
    let Some(h) = KafkaHarness::tansu().await else {
        return;
    };
    conformance::delivers_a_batch(&h).await;
    conformance::maps_headers_key_and_destination(&h).await;
    conformance::calls_in_flight_at_once_each_settle_their_own_events(&h).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tansu_keeps_order_and_drains_a_large_batch() {
    let Some(h) = KafkaHarness::tansu().await else {
        return;
    };
    let pool = test_db().await.pool().await;
    conformance::keeps_aggregate_order(&h, &pool).await;
    let pool = test_db().await.pool().await;
    conformance::drains_a_large_batch(&h, &pool, 5_000).await;
}

outbox_testkit::conformance_suite! { @relayed KafkaHarness::tansu().await;
    tansu_rejects_an_oversized_message(h, pool) => conformance::rejects_an_oversized_message(&h, &pool),
    tansu_outage_burns_no_attempts(h, pool) => conformance::outage_burns_no_attempts(&h, &pool),
}
