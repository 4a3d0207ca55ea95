//! The publisher conformance suite for [`SqsPublisher`] and
//! [`SnsPublisher`], against moto's server mode started by the test kit
//! (`pip install "moto[server]"`; `OUTBOX_SKIP_BROKER_TESTS=moto` skips
//! these tests instead), in three set-ups:
//!
//! * SQS FIFO (`….fifo`): every case;
//! * SQS standard: every case but `keeps_aggregate_order`, because a
//!   standard queue does not promise order (the service's own capability,
//!   not the publisher's);
//! * SNS FIFO: published to a FIFO topic, delivered into an SQS FIFO queue
//!   subscribed to it with raw message delivery, read back there.
//!
//! Each test has queues (and topics) of its own on one shared server; the
//! outage case has a server of its own. moto keeps everything in memory, so
//! after a restart the harness creates the queues again, and
//! `survives_a_broker_restart` does not apply (its data is gone). In the
//! outage case the publisher reaches moto through a [`Gate`] that stays shut
//! until they exist again: an SNS topic created but not yet subscribed
//! accepts messages and drops them, which the real service, whose state
//! survives, never does.
//!
//! SQS queue and SNS topic names cannot hold the dot of the suite's
//! override destination (`<scope>.override`): the harness's publisher
//! sends an event with that override to `<scope>-override` (plus `.fifo`,
//! or as a topic ARN) and reports it back under the suite's name. Nothing
//! else is changed.
//!
//! Longer than most files: three set-ups of the suite, and the SQS-only
//! cases (group and de-duplication ids, the headers past ten attributes, a
//! missing queue).
#![cfg(feature = "sqs")]

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use outbox::{Event, Outcome, Publisher, Unavailable};
use outbox_publishers::sqs::{SnsConfig, SnsPublisher, SqsConfig, SqsPublisher};
use outbox_testkit::brokers::moto::client::{self, Received as Message};
use outbox_testkit::brokers::moto::{Moto, ACCOUNT, REGION};
use outbox_testkit::conformance::{self, Capabilities, Harness, Received, Scope};
use outbox_testkit::postgres::test_db;

/// The services' default limit on one message.
const MAX_MESSAGE_BYTES: usize = 256 * 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    SqsFifo,
    SqsStandard,
    SnsFifo,
}

impl Mode {
    fn fifo(self) -> bool {
        self != Mode::SqsStandard
    }

    /// `name` with `.fifo` where the mode wants it.
    fn queue(self, name: &str) -> String {
        match self.fifo() {
            true => format!("{name}.fifo"),
            false => name.to_owned(),
        }
    }
}

/// The server shared by the tests that do not stop it; `None` if skipped.
static SHARED: OnceLock<Option<Arc<Mutex<Moto>>>> = OnceLock::new();

/// The SDK's chain reads credentials from the environment; moto takes any.
fn test_credentials() {
    static SET: OnceLock<()> = OnceLock::new();
    SET.get_or_init(|| {
        std::env::set_var("AWS_ACCESS_KEY_ID", "testing");
        std::env::set_var("AWS_SECRET_ACCESS_KEY", "testing");
        std::env::set_var("AWS_EC2_METADATA_DISABLED", "true");
    });
}

/// A TCP forwarder in front of moto: while shut, it drops every new
/// connection at once (as a server that is down would refuse it); open, it
/// passes connections through. Connections already passed through end
/// when moto stops.
struct Gate {
    url: String,
    open: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<()>,
}

impl Gate {
    /// An open gate to moto on `port`.
    async fn to(port: u16) -> Gate {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let open = Arc::new(AtomicBool::new(true));
        let gate = open.clone();
        let task = tokio::spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                if !gate.load(Ordering::SeqCst) {
                    continue;
                }
                tokio::spawn(async move {
                    if let Ok(mut outbound) =
                        tokio::net::TcpStream::connect(("127.0.0.1", port)).await
                    {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                    }
                });
            }
        });
        Gate { url, open, task }
    }

    fn set_open(&self, open: bool) {
        self.open.store(open, Ordering::SeqCst);
    }
}

impl Drop for Gate {
    fn drop(&mut self) {
        self.task.abort();
    }
}

struct SqsHarness {
    moto: Arc<Mutex<Moto>>,
    /// Where the publisher sends: moto, or the gate in front of it.
    endpoint: String,
    /// Where the harness itself creates queues and reads messages: moto.
    direct: String,
    gate: Option<Gate>,
    mode: Mode,
    /// The base name of this harness's queues and topics.
    base: String,
    /// The overrides prepared so far (the suite's names).
    overrides: Mutex<Vec<String>>,
    /// Everything read back so far, with where it was read: a consume
    /// takes its scope's messages from here.
    read: Mutex<Vec<(String, Message)>>,
}

impl SqsHarness {
    async fn on(moto: Arc<Mutex<Moto>>, mode: Mode, gate: Option<Gate>) -> SqsHarness {
        test_credentials();
        let direct = moto.lock().unwrap().url();
        let endpoint = gate
            .as_ref()
            .map_or_else(|| direct.clone(), |g| g.url.clone());
        let h = SqsHarness {
            moto,
            endpoint,
            direct,
            gate,
            mode,
            base: format!("t{:08x}", rand::random::<u32>()),
            overrides: Mutex::new(Vec::new()),
            read: Mutex::new(Vec::new()),
        };
        h.create(&h.base.clone()).await;
        h
    }

    /// On the shared server.
    async fn shared(mode: Mode) -> Option<SqsHarness> {
        let moto = tokio::task::spawn_blocking(|| {
            SHARED
                .get_or_init(|| {
                    Moto::start_or_skip().map(|m| {
                        eprintln!("moto ready in {:.2?}", m.last_start_duration());
                        Arc::new(Mutex::new(m))
                    })
                })
                .clone()
        })
        .await
        .unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()))?;
        Some(SqsHarness::on(moto, mode, None).await)
    }

    /// On a server of its own, behind a gate.
    async fn private(mode: Mode) -> Option<SqsHarness> {
        let moto = Moto::start_or_skip_blocking().await?;
        let gate = Gate::to(moto.port()).await;
        Some(SqsHarness::on(Arc::new(Mutex::new(moto)), mode, Some(gate)).await)
    }

    /// The queue (and for SNS the topic subscribed to it) named `name`.
    async fn create(&self, name: &str) {
        let sqs = client::sqs(&self.direct);
        let url = client::create_queue(&sqs, &self.mode.queue(name)).await;
        if self.mode == Mode::SnsFifo {
            let sns = client::sns(&self.direct);
            let arn = client::create_topic(&sns, &self.mode.queue(name)).await;
            client::subscribe_queue(&sns, &sqs, &arn, &url).await;
        }
    }

    /// The SQS or SNS name of the suite's destination `name`.
    fn service_name(&self, name: &str) -> String {
        self.mode.queue(&name.replace('.', "-"))
    }

    /// What the publisher is given for the suite's destination `name`.
    fn address(&self, name: &str) -> String {
        match self.mode {
            Mode::SnsFifo => format!("arn:aws:sns:{REGION}:{ACCOUNT}:{}", self.service_name(name)),
            _ => self.service_name(name),
        }
    }

    fn sqs_config(&self) -> SqsConfig {
        SqsConfig {
            queue: self.address(&self.base),
            region: Some(REGION.into()),
            endpoint_url: Some(self.endpoint.clone()),
            timeout_ms: 30_000,
            connect_timeout_ms: 1_000,
            ..SqsConfig::default()
        }
    }

    fn sns_config(&self) -> SnsConfig {
        SnsConfig {
            topic_arn: self.address(&self.base),
            region: Some(REGION.into()),
            endpoint_url: Some(self.endpoint.clone()),
            timeout_ms: 30_000,
            connect_timeout_ms: 1_000,
            ..SnsConfig::default()
        }
    }

    /// Reads whatever is in the queue of the suite's destination `name`.
    async fn drain(&self, name: &str) {
        let sqs = client::sqs(&self.direct);
        let url = format!(
            "{}/{ACCOUNT}/{}",
            self.direct,
            self.mode.queue(&name.replace('.', "-"))
        );
        let got = client::receive(&sqs, &url, Duration::ZERO, |_| false).await;
        let label = if name == self.base { "default" } else { name };
        let mut read = self.read.lock().unwrap();
        read.extend(got.into_iter().map(|m| (label.to_owned(), m)));
    }
}

/// The harness's publisher: the SQS or SNS one, with the suite's override
/// names turned into names the services take.
struct Renaming {
    inner: Arc<dyn Publisher>,
    rename: Box<dyn Fn(&str) -> String + Send + Sync>,
}

#[async_trait]
impl Publisher for Renaming {
    fn name(&self) -> &str {
        self.inner.name()
    }
    async fn publish(&self, batch: &[Event]) -> Result<Vec<Outcome>, Unavailable> {
        let renamed: Vec<Event> = batch
            .iter()
            .map(|e| {
                let mut e = e.clone();
                e.topic = e.topic.as_deref().map(|t| (self.rename)(t));
                e
            })
            .collect();
        self.inner.publish(&renamed).await
    }
    async fn health(&self) -> Result<(), Unavailable> {
        self.inner.health().await
    }
}

#[async_trait(?Send)]
impl Harness for SqsHarness {
    type Publisher = Renaming;

    fn name(&self) -> String {
        match self.mode {
            Mode::SqsFifo => "sqs (fifo, moto)".into(),
            Mode::SqsStandard => "sqs (standard, moto)".into(),
            Mode::SnsFifo => "sns (fifo, moto, into sqs)".into(),
        }
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            keyed: false,
            // The publisher refuses it before sending (max_message_bytes).
            oversized_payload_bytes: Some(MAX_MESSAGE_BYTES + 1_000),
            stop_start: true,
            keeps_data_across_restart: false,
        }
    }

    async fn publisher(&self) -> Renaming {
        let inner: Arc<dyn Publisher> = match self.mode {
            Mode::SnsFifo => Arc::new(SnsPublisher::new(self.sns_config()).expect("sns publisher")),
            _ => Arc::new(SqsPublisher::new(self.sqs_config()).expect("sqs publisher")),
        };
        let mode = self.mode;
        Renaming {
            inner,
            rename: Box::new(move |t| {
                let name = mode.queue(&t.replace('.', "-"));
                match mode {
                    Mode::SnsFifo => format!("arn:aws:sns:{REGION}:{ACCOUNT}:{name}"),
                    _ => name,
                }
            }),
        }
    }

    fn default_destination(&self, _scope: &Scope) -> String {
        "default".into()
    }

    async fn prepare(&self, scope: &Scope) {
        let name = scope.override_destination();
        self.create(&name.replace('.', "-")).await;
        self.overrides.lock().unwrap().push(name);
    }

    async fn consume(&self, scope: &Scope, expected: usize, deadline: Duration) -> Vec<Received> {
        let end = Instant::now() + deadline;
        loop {
            self.drain(&self.base.clone()).await;
            self.drain(&scope.override_destination()).await;
            let out: Vec<Received> = self
                .read
                .lock()
                .unwrap()
                .iter()
                .filter(|(_, m)| {
                    m.attributes
                        .get("outbox-aggregate-type")
                        .map(String::as_str)
                        == Some(scope.aggregate_type())
                })
                .map(|(destination, m)| Received {
                    destination: destination.clone(),
                    key: None,
                    headers: m.headers(),
                    payload: m.body.clone().into_bytes(),
                })
                .collect();
            if conformance::distinct_events(&out) >= expected || Instant::now() > end {
                return out;
            }
        }
    }

    async fn stop_broker(&self) {
        if let Some(gate) = &self.gate {
            gate.set_open(false);
        }
        let m = self.moto.clone();
        tokio::task::spawn_blocking(move || m.lock().unwrap().stop())
            .await
            .unwrap();
    }

    async fn start_broker(&self) {
        let m = self.moto.clone();
        let took = tokio::task::spawn_blocking(move || {
            let mut m = m.lock().unwrap();
            m.start_again().unwrap_or_else(|e| panic!("{e}"));
            m.last_start_duration()
        })
        .await
        .unwrap();
        eprintln!("moto restarted in {took:.2?}; creating the queues again");
        self.create(&self.base.clone()).await;
        let overrides = self.overrides.lock().unwrap().clone();
        for name in overrides {
            self.create(&name.replace('.', "-")).await;
        }
        if let Some(gate) = &self.gate {
            gate.set_open(true);
        }
    }
}

// ---- the suite, for each set-up ----

macro_rules! suite {
    ($module:ident, $mode:expr) => {
        mod $module {
            use super::*;

            outbox_testkit::conformance_suite! { @direct SqsHarness::shared($mode).await;
                delivers_a_batch(h) => conformance::delivers_a_batch(&h),
                maps_headers_key_and_destination(h) => conformance::maps_headers_key_and_destination(&h),
                calls_in_flight_at_once_each_settle_their_own_events(h) => conformance::calls_in_flight_at_once_each_settle_their_own_events(&h),
            }

            outbox_testkit::conformance_suite! { @relayed SqsHarness::shared($mode).await;
                drains_a_large_batch(h, pool) => conformance::drains_a_large_batch(&h, &pool, 1_000),
                rejects_an_oversized_message(h, pool) => conformance::rejects_an_oversized_message(&h, &pool),
                delivers_every_event_as_stored(h, pool) => conformance::delivers_every_event_as_stored(&h, &pool, Some(200_000)),
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn outage_and_restart() {
                let Some(h) = SqsHarness::private($mode).await else {
                    return;
                };
                let pool = test_db().await.pool().await;
                conformance::outage_burns_no_attempts(&h, &pool).await;
                let pool = test_db().await.pool().await;
                conformance::survives_a_broker_restart(&h, &pool).await;
            }
        }
    };
}

suite!(sqs_fifo, Mode::SqsFifo);
suite!(sqs_standard, Mode::SqsStandard);
suite!(sns_fifo, Mode::SnsFifo);

// Order per aggregate: FIFO queues and topics keep it (the message group is
// the aggregate); a standard queue does not promise it.

outbox_testkit::conformance_suite! { @relayed SqsHarness::shared(Mode::SqsFifo).await;
    sqs_fifo_keeps_aggregate_order(h, pool) => conformance::keeps_aggregate_order(&h, &pool),
}

outbox_testkit::conformance_suite! { @relayed SqsHarness::shared(Mode::SnsFifo).await;
    sns_fifo_keeps_aggregate_order(h, pool) => conformance::keeps_aggregate_order(&h, &pool),
}

// ---- SQS and SNS specifics ----

/// On a FIFO queue the group id is the aggregate id and the de-duplication
/// id the event id: the same event sent twice is stored once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifo_group_and_dedup_ids() {
    let Some(h) = SqsHarness::shared(Mode::SqsFifo).await else {
        return;
    };
    let scope = Scope::new("ids");
    let mut event = conformance::event(&scope, "order 7/é", 0);
    event.payload = r#"{"n": 1e400, "big": 123456789012345678901234567890}"#.into();
    let p = h.publisher().await;
    for _ in 0..2 {
        conformance::deliver(&p, &event).await;
    }
    h.drain(&h.base.clone()).await;
    let read = h.read.lock().unwrap().clone();
    assert_eq!(
        read.len(),
        1,
        "one copy within the de-duplication window: {read:?}"
    );
    let m = &read[0].1;
    assert_eq!(m.body, event.payload, "the body is the payload as stored");
    assert_eq!(m.group_id.as_deref(), Some("order%207/%C3%A9"));
    assert_eq!(m.dedup_id, Some(event.id.to_string()));
}

/// Twelve producer headers: the first five are attributes of their own
/// (with the four identity ones), the rest arrive in `outbox-headers`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn headers_past_ten_attributes_arrive_in_one_json_attribute() {
    let Some(h) = SqsHarness::shared(Mode::SqsStandard).await else {
        return;
    };
    let scope = Scope::new("many");
    let mut event = conformance::event(&scope, "a", 0);
    for i in 0..12 {
        event.headers.insert(format!("h{i:02}"), format!("v{i}"));
    }
    event.headers.insert("bad name".into(), "x".into());
    let p = h.publisher().await;
    conformance::deliver(&p, &event).await;
    h.drain(&h.base.clone()).await;
    let read = h.read.lock().unwrap().clone();
    assert_eq!(read.len(), 1);
    let m = &read[0].1;
    assert_eq!(m.attributes.len(), 10, "{:?}", m.attributes);
    assert!(m.attributes.contains_key("outbox-headers"));
    let headers = m.headers();
    for (k, v) in event.message_headers() {
        assert_eq!(headers.get(&k), Some(&v), "{k}");
    }
}

/// A queue that does not exist is an outage (an operator's fix), named in
/// the message, for publish and health alike; an override naming a queue
/// that cannot exist is that event's rejection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_queue_is_an_outage_and_a_bad_override_a_rejection() {
    let Some(h) = SqsHarness::shared(Mode::SqsStandard).await else {
        return;
    };
    let scope = Scope::new("missing");
    let p = SqsPublisher::new(SqsConfig {
        queue: "no-such-queue".into(),
        ..h.sqs_config()
    })
    .unwrap();
    let event = conformance::event(&scope, "a", 0);
    let e = conformance::expect_outage(&p, &event, "a missing queue is an outage").await;
    assert!(e.message.contains("no-such-queue"), "{e}");
    assert!(!e.message.contains("testing"), "{e}");
    let e = p.health().await.expect_err("health fails too");
    assert!(e.message.contains("no-such-queue"), "{e}");

    let p = SqsPublisher::new(h.sqs_config()).unwrap();
    p.health().await.unwrap();
    let mut bad = conformance::event(&scope, "b", 0);
    bad.topic = Some("not a queue!".into());
    let good = conformance::event(&scope, "c", 0);
    let outcomes = p.publish(&[bad, good]).await.unwrap();
    assert!(
        matches!(&outcomes[0], Outcome::Rejected(w) if w.contains("queue name")),
        "{outcomes:?}"
    );
    assert_eq!(outcomes[1], Outcome::Delivered);
    let ids: HashSet<String> = {
        h.drain(&h.base.clone()).await;
        h.read
            .lock()
            .unwrap()
            .iter()
            .filter_map(|(_, m)| m.attributes.get("outbox-aggregate-id").cloned())
            .collect()
    };
    assert_eq!(ids, HashSet::from(["c".to_owned()]));
}

/// A case added to the suite must be run here too: by the set-up macro for
/// all three set-ups, but for the order case, which the FIFO set-ups run
/// on their own.
#[test]
fn every_conformance_case_is_run() {
    let source = include_str!("conformance_sqs.rs");
    conformance::assert_runs_every_case(source, &[]);
    let start = source.find("macro_rules! suite").expect("the set-up macro");
    let end = source.find("suite!(sqs_fifo").expect("its uses");
    conformance::assert_runs_every_case(
        &source[start..end],
        &[(
            "keeps_aggregate_order",
            "a standard SQS queue does not promise order: run for FIFO queues and topics only",
        )],
    );
}
