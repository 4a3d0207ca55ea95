//! W3C trace context through `outbox relay`: rows written by plain SQL with
//! a hand-written `traceparent` keep their trace id through Kafka
//! (librdkafka's mock cluster) and RabbitMQ (a real server from the test
//! kit); a malformed `traceparent` is delivered untouched, never blocked.
//! With `OTEL_EXPORTER_OTLP_ENDPOINT` set, an in-process OTLP receiver
//! decodes the exported publish span and the Kafka message names it, in
//! the table mode and in the WAL mode (events emitted with `outbox_emit`).
//! `OUTBOX_SKIP_BROKER_TESTS` naming `kafka` or `rabbitmq` skips a test.

#[path = "common/brokers.rs"]
mod brokers;
mod common;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use lapin::{Connection, ConnectionProperties};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::common::v1::KeyValue;
use opentelemetry_proto::tonic::trace::v1::Span;
use outbox_testkit::brokers::rabbitmq::RabbitMq;
use prost::Message as _;
use rdkafka::consumer::Consumer;
use rdkafka::message::{Headers, Message};
use sqlx::PgPool;
use uuid::Uuid;

const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const PARENT_ID: &str = "00f067aa0ba902b7";
const TRACESTATE: &str = "congo=t61rcWkgMzE";
const MALFORMED: &str = "00-not-a-trace-01";
const KAFKA_TOPIC: &str = "outbox.event.order";
const SERVICE: &str = "outbox-under-test";
const OTEL_VARS: [&str; 3] = [
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_SERVICE_NAME",
];

fn hand_written() -> String {
    format!("00-{TRACE_ID}-{PARENT_ID}-01")
}

/// The three rows, written as a producer in another language would.
struct Rows {
    traced: Uuid,
    malformed: Uuid,
    plain: Uuid,
}

async fn insert(pool: &PgPool, headers: serde_json::Value) -> Uuid {
    sqlx::query_scalar(
        "INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload, headers)
         VALUES ('order', gen_random_uuid()::text, 'order.created', '{}', $1) RETURNING id",
    )
    .bind(headers)
    .fetch_one(pool)
    .await
    .unwrap()
}

async fn insert_rows(pool: &PgPool) -> Rows {
    Rows {
        traced: insert(
            pool,
            serde_json::json!({"traceparent": hand_written(), "tracestate": TRACESTATE}),
        )
        .await,
        malformed: insert(pool, serde_json::json!({"traceparent": MALFORMED})).await,
        plain: insert(pool, serde_json::json!({})).await,
    }
}

/// Message headers by event id (header `outbox-event-id`).
type Received = BTreeMap<Uuid, BTreeMap<String, String>>;

/// Checks what holds with or without an exporter: every row delivered, the
/// trace id kept, `tracestate` as stored, the malformed header untouched.
/// Returns the traced message's parent span id.
fn check_delivered(broker: &str, rows: &Rows, got: &Received) -> String {
    assert_eq!(got.len(), 3, "{broker}: {got:?}");
    let traced = &got[&rows.traced];
    let parts: Vec<&str> = traced["traceparent"].split('-').collect();
    assert_eq!(parts.len(), 4, "{broker}: {traced:?}");
    assert_eq!(parts[1], TRACE_ID, "{broker}: the producer's trace id");
    assert_eq!(traced["tracestate"], TRACESTATE, "{broker}");
    assert_eq!(
        got[&rows.malformed]["traceparent"], MALFORMED,
        "{broker}: forwarded untouched"
    );
    assert!(
        !got[&rows.plain].contains_key("traceparent"),
        "{broker}: {:?}",
        got[&rows.plain]
    );
    parts[2].to_owned()
}

// ---- an OTLP/HTTP receiver ----

#[derive(Clone, Default)]
struct Otlp(Arc<Mutex<Vec<ExportTraceServiceRequest>>>);

impl Otlp {
    async fn start(&self) -> SocketAddr {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let seen = self.clone();
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let seen = seen.clone();
                tokio::spawn(async move {
                    let service = service_fn(move |req| seen.clone().receive(req));
                    let _ = http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        addr
    }

    async fn receive(self, req: Request<Incoming>) -> Result<Response<Full<Bytes>>, hyper::Error> {
        let path = req.uri().path().to_owned();
        let body = req.into_body().collect().await?.to_bytes();
        if path != "/v1/traces" {
            return Ok(Response::builder()
                .status(404)
                .body(Full::default())
                .unwrap());
        }
        let request = ExportTraceServiceRequest::decode(body).expect("an OTLP trace request");
        self.0.lock().unwrap().push(request);
        Ok(Response::new(Full::default()))
    }

    /// Every span received, with its resource's `service.name`.
    fn spans(&self) -> Vec<(String, Span)> {
        let mut out = Vec::new();
        for request in self.0.lock().unwrap().iter() {
            for resource in &request.resource_spans {
                let service = resource
                    .resource
                    .as_ref()
                    .and_then(|r| text(&r.attributes, "service.name"))
                    .unwrap_or_default();
                for scope in &resource.scope_spans {
                    for span in &scope.spans {
                        out.push((service.clone(), span.clone()));
                    }
                }
            }
        }
        out
    }
}

fn text(attributes: &[KeyValue], key: &str) -> Option<String> {
    attributes.iter().find(|kv| kv.key == key).and_then(|kv| {
        match kv.value.as_ref()?.value.as_ref()? {
            Value::StringValue(s) => Some(s.clone()),
            other => Some(format!("{other:?}")),
        }
    })
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

// ---- Kafka ----

fn kafka_read_back(bootstrap: &str, expected: usize) -> Received {
    let consumer = brokers::kafka_consumer(bootstrap, "trace-context");
    consumer.subscribe(&[KAFKA_TOPIC]).expect("subscribing");
    let end = Instant::now() + Duration::from_secs(60);
    let mut got = Received::new();
    while got.len() < expected && Instant::now() < end {
        if let Some(Ok(m)) = consumer.poll(Duration::from_millis(200)) {
            let mut headers = BTreeMap::new();
            for h in m.headers().iter().flat_map(|h| h.iter()) {
                let value = String::from_utf8_lossy(h.value.unwrap_or_default());
                headers.insert(h.key.to_owned(), value.into_owned());
            }
            got.insert(headers["outbox-event-id"].parse().unwrap(), headers);
        }
    }
    got
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_messages_keep_the_rows_trace_id_and_name_the_exported_publish_span() {
    let (db, pool) = outbox_testkit::postgres::migrated_test_db().await;
    kafka_trace(&db.url, &pool, |p, h| async move { insert(&p, h).await }).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_the_wal_mode_kafka_messages_keep_the_trace_id_and_name_the_exported_publish_span() {
    let cluster = tokio::task::spawn_blocking(|| outbox_testkit::postgres::logical_cluster(&[]))
        .await
        .unwrap();
    let url = cluster.url();
    let out = common::run(&["migrate", "--mode", "wal"], Some(&url));
    assert!(out.status.success(), "{}", common::text(&out.stderr));
    let pool = PgPool::connect(&url).await.unwrap();
    kafka_trace(&url, &pool, |p, h| async move { emit(&p, h).await }).await;
}

/// An event emitted in the WAL mode, with `headers`; its id.
async fn emit(pool: &PgPool, headers: serde_json::Value) -> Uuid {
    sqlx::query_scalar(
        "SELECT outbox_emit('order', gen_random_uuid()::text, 'order.created', '{}', $1)",
    )
    .bind(headers)
    .fetch_one(pool)
    .await
    .unwrap()
}

/// Three events written by `write` (traced, malformed, plain), drained by
/// `outbox relay` to librdkafka's mock cluster with an OTLP exporter: the
/// one publish span, its parent the row's, named in the traced message.
async fn kafka_trace<F, Fut>(url: &str, pool: &PgPool, write: F)
where
    F: Fn(PgPool, serde_json::Value) -> Fut,
    Fut: std::future::Future<Output = Uuid>,
{
    let Some((mock, bootstrap)) = brokers::kafka_mock_or_skip(1, KAFKA_TOPIC, 1) else {
        return;
    };
    let otlp = Otlp::default();
    let collector = otlp.start().await;
    let rows = Rows {
        traced: write(
            pool.clone(),
            serde_json::json!({"traceparent": hand_written(), "tracestate": TRACESTATE}),
        )
        .await,
        malformed: write(pool.clone(), serde_json::json!({"traceparent": MALFORMED})).await,
        plain: write(pool.clone(), serde_json::json!({})).await,
    };

    let mut cmd = common::bin();
    cmd.env("DATABASE_URL", url)
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", format!("http://{collector}"))
        .env("OTEL_SERVICE_NAME", SERVICE)
        .env_remove("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        .args(["relay", "--drain", "--instance-id", "traced"])
        .args(["--publisher", &format!("kafka://{bootstrap}")]);
    common::drain(cmd, pool).await;

    let got = tokio::task::spawn_blocking(move || kafka_read_back(&bootstrap, 3))
        .await
        .unwrap();
    let parent = check_delivered("kafka", &rows, &got);

    // The relay exported its spans before exiting.
    let spans = otlp.spans();
    assert_eq!(spans.len(), 1, "one publish span, for the traced row only");
    let (service, span) = &spans[0];
    assert_eq!(service, SERVICE);
    assert_eq!(span.name, format!("publish {KAFKA_TOPIC}"));
    assert_eq!(
        text(&span.attributes, "messaging.destination.name").as_deref(),
        Some(KAFKA_TOPIC)
    );
    assert_eq!(hex(&span.trace_id), TRACE_ID, "one trace");
    assert_eq!(
        hex(&span.parent_span_id),
        PARENT_ID,
        "child of the row's span"
    );
    assert_eq!(
        parent,
        hex(&span.span_id),
        "the message's parent is the publish span"
    );
    assert_eq!(
        text(&span.attributes, "messaging.message.id"),
        Some(rows.traced.to_string())
    );
    assert_eq!(
        text(&span.attributes, "messaging.system").as_deref(),
        Some("kafka")
    );
    assert_eq!(
        text(&span.attributes, "outbox.outcome").as_deref(),
        Some("delivered")
    );
    drop(mock);
}

// ---- RabbitMQ ----

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rabbitmq_messages_carry_the_rows_traceparent_unchanged_without_an_exporter() {
    let Some(rabbit) = tokio::task::spawn_blocking(RabbitMq::start_or_skip)
        .await
        .unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()))
    else {
        return;
    };
    let (db, pool) = outbox_testkit::postgres::migrated_test_db().await;
    let conn = Connection::connect(&rabbit.url(), ConnectionProperties::default())
        .await
        .expect("connecting to rabbitmq");
    let ch = conn.create_channel().await.expect("channel");
    let queue = "trace-context";
    outbox_testkit::brokers::rabbitmq::bind_queue(&ch, "outbox", queue, "#").await;
    let rows = insert_rows(&pool).await;

    let mut cmd = common::bin();
    for var in OTEL_VARS {
        cmd.env_remove(var);
    }
    cmd.env("DATABASE_URL", &db.url)
        .args(["relay", "--drain", "--instance-id", "untraced"])
        .args(["--publisher", &rabbit.url()]);
    common::drain(cmd, &pool).await;

    let mut consumer = brokers::amqp_consume(&ch, queue, "trace-context").await;
    let mut got = Received::new();
    while got.len() < 3 {
        let delivery = tokio::time::timeout(Duration::from_secs(30), consumer.next())
            .await
            .expect("three messages within 30 s")
            .expect("the consumer ended")
            .expect("delivery");
        let headers = outbox_testkit::brokers::rabbitmq::headers_as_text(&delivery.properties);
        let id = delivery
            .properties
            .message_id()
            .as_ref()
            .expect("message_id");
        got.insert(id.as_str().parse().unwrap(), headers);
    }
    let _ = conn.close(200, "consumed".into()).await;
    let parent = check_delivered("rabbitmq", &rows, &got);
    assert_eq!(parent, PARENT_ID, "no exporter: forwarded as stored");
}
