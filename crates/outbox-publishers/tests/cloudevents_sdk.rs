//! CloudEvents messages, captured from real brokers, read back by the
//! official CloudEvents SDK for Python (`tests/cloudevents/read.py`, run by
//! `outbox_testkit::cloudevents::sdk_read`): the mapping of each protocol
//! binding is checked by code we did not write.
//!
//! Every test publishes one event in binary and one in structured mode,
//! reads both back from the broker (librdkafka's mock cluster, RabbitMQ,
//! NATS JetStream, Redis, the webhook receiver, a JSON-lines file), and
//! has the SDK parse them; every attribute must have its value and no
//! other attribute may appear. The data must be the stored payload, and
//! the body of a binary message must be its very bytes.
//!
//! Needs `python3` with `cloudevents>=2.2` (`pip install 'cloudevents>=2.2,<3'`;
//! `.ci/run` installs it).
//!
//! Longer than most files: one test per broker, each capturing a binary and
//! a structured message and handing both to the SDK.

/// The unit tests' events, shared with these tests.
#[path = "../src/test_support.rs"]
mod test_support;

use std::collections::BTreeMap;
#[allow(unused_imports)]
use std::time::{Duration, Instant};

use chrono::TimeZone;
use outbox::{Event, Outcome, Publisher};
use outbox_publishers::{Envelope, FilePublisher, Format};
use serde_json::{json, Value};

const SOURCE: &str = "/outbox/shop";
const TRACEPARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
const PAYLOAD: &str =
    r#"{"order_id": 42, "big": 123456789012345678901234567890, "note": "é ✓", "lines": [1, 2.50]}"#;

/// An `order.created` event of aggregate `order`/`aggregate_id` (the unit
/// tests' event) with trace headers and one header of the producer's own,
/// a payload of its own and a fixed time, destined for `topic`.
fn event(aggregate_id: &str, topic: &str) -> Event {
    let headers = [
        ("traceparent", TRACEPARENT),
        ("tracestate", "congo=t61rcWkgMzE"),
        ("x-tenant", "acme"),
    ];
    Event {
        payload: PAYLOAD.into(),
        topic: Some(topic.into()),
        created_at: chrono::Utc.with_ymd_and_hms(2026, 12, 1, 6, 9, 46).unwrap()
            + chrono::Duration::microseconds(123_456),
        ..test_support::event(aggregate_id, &headers)
    }
}

fn envelope(format: Format) -> Envelope {
    Envelope::new(format, SOURCE)
}

/// Every attribute `e` must arrive with.
fn expected(e: &Event) -> Value {
    json!({
        "specversion": "1.0",
        "id": e.id.to_string(),
        "source": SOURCE,
        "type": e.event_type,
        "subject": e.aggregate_id,
        "time": "2026-12-01T06:09:46.123456Z",
        "datacontenttype": "application/json",
        "aggregatetype": e.aggregate_type,
        "partitionkey": e.aggregate_id,
        "traceparent": TRACEPARENT,
        "tracestate": "congo=t61rcWkgMzE",
    })
}

/// A message as a broker gave it back.
#[derive(Debug, Clone, Default)]
struct Captured {
    headers: BTreeMap<String, String>,
    body: Vec<u8>,
    key: Option<String>,
    content_type: Option<String>,
}

/// Runs the SDK's reader for `binding` on `m`; with `expect`, it also
/// checks the attributes. `Ok` is what it read, `Err` why it refused.
fn sdk(binding: &str, m: &Captured, expect: Option<&Value>) -> Result<Value, String> {
    let mut input = json!({
        "headers": m.headers,
        "body": String::from_utf8(m.body.clone()).expect("a UTF-8 body"),
        "key": m.key,
        "content_type": m.content_type,
    });
    if let Some(expect) = expect {
        input["expect"] = expect.clone();
    }
    outbox_testkit::cloudevents::sdk_read(binding, &input)
}

/// Every format, plain included (shown beside the others, and checked to
/// be the outbox's own message).
const FORMATS: [Format; 3] = [
    Format::Plain,
    Format::CloudEventsBinary,
    Format::CloudEventsStructured,
];

/// Has the SDK read `m`, a message of `e` in `format`, and checks all of
/// it: attributes, data, body. A plain message is the payload with the
/// outbox's own identity, which the SDK does not read.
fn check(binding: &str, format: Format, e: &Event, m: &Captured) {
    if format == Format::Plain {
        if binding != "json" && binding != "redis" {
            assert_eq!(m.body, PAYLOAD.as_bytes(), "{binding} plain: the payload");
            assert_eq!(m.headers["outbox-event-id"], e.id.to_string());
            assert!(
                !m.headers.keys().any(|k| k.to_lowercase().starts_with("ce")),
                "{m:?}"
            );
        }
        return;
    }
    let read = sdk(binding, m, Some(&expected(e)))
        .unwrap_or_else(|why| panic!("{binding} {format}: {why}\nmessage: {m:#?}"));
    let data: Value = serde_json::from_str(PAYLOAD).unwrap();
    assert_eq!(read["data"], data, "{binding} {format}: data");
    match format {
        Format::CloudEventsBinary => {
            assert_eq!(m.body, PAYLOAD.as_bytes(), "{binding}: the body as stored");
        }
        _ => {
            // The payload's stored text, embedded as it is.
            let body = String::from_utf8(m.body.clone()).unwrap();
            assert!(
                body.contains(&format!("\"data\":{PAYLOAD}")),
                "{binding}: {body}"
            );
        }
    }
}

/// Prints `m` as one `captured: {json}` line (for docs/publishers.md).
fn show(publisher: &str, format: Format, m: &Captured, fields: Option<Vec<(String, String)>>) {
    let headers = fields.unwrap_or_else(|| {
        m.headers
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    });
    let line = json!({
        "publisher": publisher,
        "format": format.name(),
        "key": m.key,
        "content_type": m.content_type,
        "headers": headers,
        "body": String::from_utf8_lossy(&m.body),
    });
    println!("captured: {line}");
}

fn all_delivered(outcomes: Vec<Outcome>) {
    assert!(
        outcomes.iter().all(|o| matches!(o, Outcome::Delivered)),
        "{outcomes:?}"
    );
}

// ---- the reader itself ----

/// The reader's own checks reject a message that differs from the event in
/// any attribute, lacks one, or carries one more; the SDK refuses what is
/// not a CloudEvent.
#[test]
fn the_reader_rejects_tampered_messages() {
    let e = event("order-42", "t");
    let mut good = Captured {
        body: PAYLOAD.into(),
        key: Some(e.aggregate_id.clone()),
        ..Captured::default()
    };
    envelope(Format::CloudEventsBinary).binary_attributes(
        &e,
        &outbox_publishers::cloudevents::KAFKA,
        |k, v| {
            good.headers.insert(k.into(), v.into());
        },
    );
    good.headers
        .insert("content-type".into(), "application/json".into());
    check("kafka", Format::CloudEventsBinary, &e, &good);

    let tamper = |name: &str, value: Option<&str>| {
        let mut m = good.clone();
        match value {
            Some(v) => m.headers.insert(name.into(), v.into()),
            None => m.headers.remove(name),
        };
        sdk("kafka", &m, Some(&expected(&e))).unwrap_err()
    };
    let why = tamper("ce_type", Some("order.deleted"));
    assert!(
        why.contains("attribute type") && why.contains("order.deleted"),
        "{why}"
    );
    let why = tamper("ce_time", Some("2026-12-01T06:09:47Z"));
    assert!(why.contains("attribute time"), "{why}");
    // The SDK makes up an id when there is none: the check catches it.
    let why = tamper("ce_id", None);
    assert!(why.contains("attribute id"), "{why}");
    let why = tamper("ce_traceparent", None);
    assert!(why.contains("attribute traceparent: missing"), "{why}");
    let why = tamper("ce_extra", Some("x"));
    assert!(why.contains("not expected: extra"), "{why}");
    // Not a CloudEvent at all: the SDK refuses it.
    let not_json = Captured {
        body: b"{\"specversion\": \"1.0\", \"id\": 1".to_vec(),
        ..Captured::default()
    };
    let why = sdk("json", &not_json, None).unwrap_err();
    assert!(why.contains("the SDK refused"), "{why}");
}

// ---- stdout and file: structured lines ----

#[tokio::test]
async fn file_lines_are_structured_cloudevents_in_either_format() {
    let dir = tempfile::tempdir().unwrap();
    for format in FORMATS {
        let path = dir.path().join(format!("{format}.jsonl"));
        let p = FilePublisher::open(&path)
            .unwrap()
            .with_envelope(envelope(format));
        let e = event("order-42", "t");
        all_delivered(p.publish(std::slice::from_ref(&e)).await.unwrap());
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text.lines().count(), 1, "{text}");
        let line = Captured {
            body: text.trim_end().as_bytes().to_vec(),
            ..Captured::default()
        };
        if format == Format::Plain {
            assert_eq!(text.trim_end(), e.json_line(), "plain lines unchanged");
        } else {
            check("json", Format::CloudEventsStructured, &e, &line);
        }
        show("file", format, &line, None);
    }
}

// ---- Kafka ----

#[cfg(feature = "kafka")]
mod kafka {
    use super::*;
    use outbox_publishers::kafka::{KafkaConfig, KafkaPublisher};
    use rdkafka::config::ClientConfig;
    use rdkafka::consumer::{BaseConsumer, Consumer};
    use rdkafka::message::{Headers, Message};
    use rdkafka::mocking::MockCluster;
    use rdkafka::{Offset, TopicPartitionList};

    fn read_one(bootstrap: &str, topic: &str) -> Captured {
        let consumer: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", bootstrap)
            .set("group.id", format!("ce-{}", uuid::Uuid::new_v4()))
            .set("enable.auto.commit", "false")
            .create()
            .unwrap();
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition_offset(topic, 0, Offset::Beginning)
            .unwrap();
        consumer.assign(&tpl).unwrap();
        let end = Instant::now() + Duration::from_secs(20);
        while Instant::now() < end {
            let Some(got) = consumer.poll(Duration::from_millis(100)) else {
                continue;
            };
            let m = got.expect("kafka message");
            let mut headers = BTreeMap::new();
            for h in m.headers().iter().flat_map(|h| h.iter()) {
                let v = String::from_utf8(h.value.unwrap_or_default().to_vec()).unwrap();
                headers.insert(h.key.to_owned(), v);
            }
            return Captured {
                headers,
                body: m.payload().unwrap_or_default().to_vec(),
                key: m.key().map(|k| String::from_utf8_lossy(k).into_owned()),
                content_type: None,
            };
        }
        panic!("nothing arrived on {topic}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn kafka_messages_follow_the_kafka_binding() {
        let mock = MockCluster::new(1).expect("librdkafka's mock cluster");
        let bootstrap = mock.bootstrap_servers();
        for format in FORMATS {
            let topic = format!("ce-{}", format.name());
            mock.create_topic(&topic, 1, 1).unwrap();
            let p = KafkaPublisher::new(KafkaConfig {
                brokers: vec![bootstrap.clone()],
                message_timeout_ms: 10_000,
                ..KafkaConfig::default()
            })
            .unwrap()
            .with_envelope(envelope(format));
            let e = event("order-42", &topic);
            all_delivered(p.publish(std::slice::from_ref(&e)).await.unwrap());
            let (b, t) = (bootstrap.clone(), topic.clone());
            let m = tokio::task::spawn_blocking(move || read_one(&b, &t))
                .await
                .unwrap();
            check("kafka", format, &e, &m);
            assert_eq!(m.key.as_deref(), Some("order-42"), "key = partitionkey");
            assert_eq!(m.headers["x-tenant"], "acme", "the producer's header");
            let content_type = match format {
                Format::Plain => None,
                Format::CloudEventsBinary => Some("application/json"),
                Format::CloudEventsStructured => Some("application/cloudevents+json"),
            };
            assert_eq!(
                m.headers.get("content-type").map(String::as_str),
                content_type
            );
            if format != Format::Plain {
                assert!(!m.headers.contains_key("outbox-event-id"), "{m:?}");
            }
            show("kafka", format, &m, None);
        }
    }
}

// ---- RabbitMQ ----

#[cfg(feature = "amqp")]
mod amqp {
    use super::*;
    use lapin::options::BasicGetOptions;
    use lapin::{Connection, ConnectionProperties};
    use outbox_publishers::amqp::{AmqpConfig, AmqpPublisher};
    use outbox_testkit::brokers::rabbitmq::{self, RabbitMq};

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn amqp_messages_follow_the_amqp_binding() {
        let Some(rabbit) = RabbitMq::start_or_skip_blocking().await else {
            return;
        };
        let url = rabbit.url();
        let config = AmqpConfig::from_url(&url).unwrap();
        let conn = Connection::connect(&url, ConnectionProperties::default())
            .await
            .unwrap();
        let ch = conn.create_channel().await.unwrap();
        for format in FORMATS {
            let key = format!("ce.{}", format.name());
            rabbitmq::bind_queue(&ch, &config.exchange, &key, &key).await;
            let p = AmqpPublisher::new(config.clone())
                .unwrap()
                .with_envelope(envelope(format));
            let e = event("order-42", &key);
            all_delivered(p.publish(std::slice::from_ref(&e)).await.unwrap());
            p.close().await;
            let end = Instant::now() + Duration::from_secs(20);
            let got = loop {
                let got = ch
                    .basic_get(key.as_str().into(), BasicGetOptions { no_ack: true })
                    .await
                    .unwrap();
                match got {
                    Some(m) => break m,
                    None if Instant::now() < end => {
                        tokio::time::sleep(Duration::from_millis(20)).await
                    }
                    None => panic!("nothing arrived on {key}"),
                }
            };
            let props = &got.delivery.properties;
            let m = Captured {
                headers: rabbitmq::headers_as_text(props),
                body: got.delivery.data.clone(),
                key: None,
                content_type: props.content_type().as_ref().map(|c| c.as_str().to_owned()),
            };
            check("amqp", format, &e, &m);
            assert_eq!(m.headers["x-tenant"], "acme", "the producer's header");
            if format != Format::Plain {
                assert!(!m.headers.contains_key("outbox-event-id"), "{m:?}");
            }
            show("amqp", format, &m, None);
        }
    }
}

// ---- NATS ----

#[cfg(feature = "nats")]
mod nats {
    use super::*;
    use outbox_publishers::nats::{NatsConfig, NatsPublisher};
    use outbox_testkit::brokers::nats::{client, Nats};

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn nats_messages_carry_ce_headers() {
        let Some(nats) = Nats::start_or_skip_blocking().await else {
            return;
        };
        let js = client::context(&nats.url()).await;
        for format in FORMATS {
            let subject = format!("ce.{}", format.name());
            let stream = format!("CE_{}", format.name().replace('-', "_"));
            client::create_stream(&js, &stream, std::slice::from_ref(&subject)).await;
            let p = NatsPublisher::new(NatsConfig::from_url(&nats.url()).unwrap())
                .unwrap()
                .with_envelope(envelope(format));
            // An aggregate id with a space and a %: percent-encoded in the
            // header, as the HTTP binding does, and decoded by the SDK.
            let e = event("order 42/100%", &subject);
            all_delivered(p.publish(std::slice::from_ref(&e)).await.unwrap());
            let got = client::read_stream(&js, &stream, Duration::from_secs(20), |_| true).await;
            let got = got.first().expect("one message");
            let m = Captured {
                headers: got.headers.clone(),
                body: got.payload.clone(),
                ..Captured::default()
            };
            check("nats", format, &e, &m);
            assert_eq!(m.headers["x-tenant"], "acme", "the producer's header");
            assert_eq!(m.headers["Nats-Msg-Id"], e.id.to_string());
            if format == Format::CloudEventsBinary {
                assert_eq!(m.headers["ce-subject"], "order%2042/100%25");
            }
            show("nats", format, &m, None);
        }
    }
}

// ---- Redis ----

#[cfg(feature = "redis")]
mod redis {
    use super::*;
    use outbox_publishers::redis::{RedisConfig, RedisPublisher};
    use outbox_testkit::brokers::redis::{client, Redis};

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn redis_entries_carry_ce_fields() {
        let Some(redis) = Redis::start_or_skip_blocking().await else {
            return;
        };
        let mut conn = client::connect(&redis.url()).await;
        for format in FORMATS {
            let key = format!("ce.{}", format.name());
            let p = RedisPublisher::new(RedisConfig::from_url(&redis.url()).unwrap())
                .unwrap()
                .with_envelope(envelope(format));
            let e = event("order-42", &key);
            all_delivered(p.publish(std::slice::from_ref(&e)).await.unwrap());
            let entries = client::read_stream(&mut conn, &key).await;
            assert_eq!(entries.len(), 1, "{entries:?}");
            let fields = entries[0].map();
            let m = Captured {
                body: entries[0].get("payload").unwrap().to_vec(),
                headers: fields.clone(),
                ..Captured::default()
            };
            check("redis", format, &e, &m);
            let headers: Value = serde_json::from_str(&fields["headers"]).unwrap();
            assert_eq!(headers["x-tenant"], "acme", "the producer's headers");
            let fields = entries[0]
                .fields
                .iter()
                .map(|(k, v)| (k.clone(), String::from_utf8_lossy(v).into_owned()))
                .collect();
            show("redis", format, &m, Some(fields));
        }
    }
}

// ---- HTTP webhooks ----

#[cfg(feature = "http")]
mod http {
    use super::*;
    use outbox_publishers::http::{HttpConfig, HttpPublisher};
    use outbox_testkit::webhook::Receiver;

    const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn webhooks_follow_the_http_binding_and_stay_signed() {
        let receiver = Receiver::start(SECRET).await;
        for format in FORMATS {
            let p = HttpPublisher::new(HttpConfig::new(receiver.url("/hooks"), SECRET))
                .unwrap()
                .with_envelope(envelope(format));
            let e = event("order 42/é", "t");
            all_delivered(p.publish(std::slice::from_ref(&e)).await.unwrap());
            let d = receiver.deliveries().pop().expect("a delivery");
            let m = Captured {
                headers: d.headers.clone(),
                body: d.body.clone(),
                ..Captured::default()
            };
            check("http", format, &e, &m);
            assert_eq!(d.headers["x-tenant"], "acme", "the producer's header");
            assert_eq!(d.headers["webhook-id"], e.id.to_string());
            let content_type = match format {
                Format::CloudEventsStructured => "application/cloudevents+json",
                _ => "application/json",
            };
            assert_eq!(d.headers["content-type"], content_type);
            show("http", format, &m, None);
        }
        // Every request carried a valid Standard Webhooks signature.
        receiver.assert_all_signed();
    }
}

// ---- SQS and SNS ----

/// SQS and SNS have no CloudEvents binding: both CloudEvents formats send
/// one structured CloudEvent as the body, which the SDK's JSON format
/// reads; the producer's headers stay message attributes.
#[cfg(feature = "sqs")]
mod sqs {
    use super::*;
    use outbox_publishers::sqs::{SnsConfig, SnsPublisher, SqsConfig, SqsPublisher};
    use outbox_testkit::brokers::moto::{client, Moto, ACCOUNT, REGION};

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn sqs_and_sns_messages_are_structured_cloudevents_in_either_format() {
        let Some(moto) = Moto::start_or_skip_blocking().await else {
            return;
        };
        // The SDK's chain reads credentials from the environment (moto
        // takes any); no other test here reads these variables.
        for (name, value) in moto.env() {
            std::env::set_var(name, value);
        }
        let endpoint = moto.url();
        let sqs = client::sqs(&endpoint);
        let sns = client::sns(&endpoint);
        for service in ["sqs", "sns"] {
            for format in FORMATS {
                let name = format!("ce-{service}-{}.fifo", format.name());
                let url = client::create_queue(&sqs, &name).await;
                let p: Box<dyn Publisher> = match service {
                    "sqs" => Box::new(
                        SqsPublisher::new(SqsConfig {
                            queue: name.clone(),
                            region: Some(REGION.into()),
                            endpoint_url: Some(endpoint.clone()),
                            ..SqsConfig::default()
                        })
                        .unwrap()
                        .with_envelope(envelope(format)),
                    ),
                    _ => {
                        let arn = client::create_topic(&sns, &name).await;
                        assert_eq!(arn, format!("arn:aws:sns:{REGION}:{ACCOUNT}:{name}"));
                        client::subscribe_queue(&sns, &sqs, &arn, &url).await;
                        Box::new(
                            SnsPublisher::new(SnsConfig {
                                topic_arn: arn,
                                region: Some(REGION.into()),
                                endpoint_url: Some(endpoint.clone()),
                                ..SnsConfig::default()
                            })
                            .unwrap()
                            .with_envelope(envelope(format)),
                        )
                    }
                };
                let mut e = event("order-42", "t");
                e.topic = None;
                all_delivered(p.publish(std::slice::from_ref(&e)).await.unwrap());
                let got =
                    client::receive(&sqs, &url, Duration::from_secs(30), |m| !m.is_empty()).await;
                assert_eq!(got.len(), 1, "{service} {format}: {got:?}");
                let m = Captured {
                    headers: got[0].headers(),
                    body: got[0].body.clone().into_bytes(),
                    ..Captured::default()
                };
                assert_eq!(m.headers["x-tenant"], "acme", "the producer's header");
                assert_eq!(got[0].group_id.as_deref(), Some("order-42"));
                if format == Format::Plain {
                    check(service, format, &e, &m);
                } else {
                    assert_eq!(m.headers["content-type"], "application/cloudevents+json");
                    check("json", Format::CloudEventsStructured, &e, &m);
                }
                show(service, format, &m, None);
            }
        }
    }
}
