//! W3C trace context through the outbox (feature `opentelemetry`): the
//! producer's span is stored with the event, the relay's publish span is
//! its child, and the message names the publish span. Spans are captured by
//! the SDK's in-memory exporter.
#![cfg(feature = "opentelemetry")]

mod common;

use async_trait::async_trait;
use common::{event, fast_config, setup, Ctx, LONG};
use opentelemetry::trace::{
    SpanContext, SpanId, SpanKind, Status, TraceContextExt, TraceFlags, TraceId, TraceState,
    TracerProvider as _,
};
use opentelemetry::{Context, KeyValue, Value};
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData};
use outbox::{Event, NewEvent, Outcome, Publisher, Relay, RelayHandle, Unavailable};
use outbox_testkit::{wait_until, Fail, Match, TestPublisher};
use std::collections::HashMap;
use tracing::Instrument;
use tracing_subscriber::layer::SubscriberExt;

/// The test publisher, naming each event's destination as a real one does.
#[derive(Clone)]
struct Named(TestPublisher);

#[async_trait]
impl Publisher for Named {
    fn name(&self) -> &str {
        "kafka"
    }
    async fn publish(&self, batch: &[Event]) -> Result<Vec<Outcome>, Unavailable> {
        self.0.publish(batch).await
    }
    fn destination(&self, event: &Event) -> Option<String> {
        Some(event.destination("outbox.event.{aggregate_type}"))
    }
}

/// An SDK tracer provider exporting to memory, synchronously at each span's
/// end.
struct Spans {
    provider: SdkTracerProvider,
    exporter: InMemorySpanExporter,
}

impl Spans {
    fn new() -> Self {
        let exporter = InMemorySpanExporter::default();
        let provider = SdkTracerProvider::builder()
            .with_simple_exporter(exporter.clone())
            .build();
        Spans { provider, exporter }
    }

    fn finished(&self) -> Vec<SpanData> {
        self.exporter.get_finished_spans().unwrap()
    }

    fn named(&self, prefix: &str) -> Vec<SpanData> {
        self.finished()
            .into_iter()
            .filter(|s| s.name.starts_with(prefix))
            .collect()
    }

    async fn wait_for(&self, prefix: &str, n: usize) -> Vec<SpanData> {
        wait_until(&format!("{n} {prefix:?} spans"), LONG, || async {
            self.named(prefix).len() >= n
        })
        .await;
        self.named(prefix)
    }
}

async fn relay(ctx: &Ctx, publisher: &TestPublisher, spans: Option<&Spans>) -> RelayHandle {
    let mut builder = Relay::builder(ctx.pool.clone(), Named(publisher.clone()))
        .config(fast_config("traced"))
        .wakeup(ctx.outbox.wakeup());
    if let Some(spans) = spans {
        builder = builder.tracer(spans.provider.tracer("outbox"));
    }
    builder.spawn().await.unwrap()
}

fn attribute(span: &SpanData, key: &str) -> Option<Value> {
    span.attributes
        .iter()
        .find(|kv| kv.key.as_str() == key)
        .map(|kv| kv.value.clone())
}

fn traceparent_of(span: &SpanData) -> String {
    format!(
        "00-{}-{}-01",
        span.span_context.trace_id(),
        span.span_context.span_id()
    )
}

async fn stored_traceparent(ctx: &Ctx, id: uuid::Uuid) -> Option<String> {
    sqlx::query_scalar("SELECT headers->>'traceparent' FROM outbox_events WHERE id = $1")
        .bind(id)
        .fetch_one(&ctx.pool)
        .await
        .unwrap()
}

#[tokio::test]
async fn the_producers_span_is_the_parent_of_each_publish_span_and_the_message_names_its_publish_span(
) {
    let ctx = setup().await;
    let spans = Spans::new();
    let layer = tracing_opentelemetry::layer().with_tracer(spans.provider.tracer("shop"));
    let _subscriber = tracing::subscriber::set_default(tracing_subscriber::registry().with(layer));

    let one = event("a", 1);
    let many = [event("b", 1), event("c", 1)];
    async {
        let mut tx = ctx.pool.begin().await.unwrap();
        ctx.outbox.enqueue(&mut *tx, &one).await.unwrap();
        ctx.outbox.enqueue_many(&mut *tx, &many).await.unwrap();
        tx.commit().await.unwrap();
    }
    .instrument(tracing::info_span!("place_order"))
    .await;
    let producer = spans.wait_for("place_order", 1).await.remove(0);
    for id in [one.id, many[0].id, many[1].id] {
        assert_eq!(
            stored_traceparent(&ctx, id).await.as_deref(),
            Some(traceparent_of(&producer).as_str()),
            "the stored traceparent names the producer's span"
        );
    }

    let publisher = TestPublisher::new();
    let relay = relay(&ctx, &publisher, Some(&spans)).await;
    let publishes = spans.wait_for("publish", 3).await;
    relay.shutdown().await.unwrap();

    let deliveries = publisher.deliveries();
    assert_eq!(deliveries.len(), 3);
    for delivered in &deliveries {
        let span = publishes
            .iter()
            .find(|s| attribute(s, "messaging.message.id") == Some(delivered.id.to_string().into()))
            .expect("a publish span per event");
        assert_eq!(span.name, "publish outbox.event.order");
        assert_eq!(span.span_kind, SpanKind::Producer);
        assert_eq!(
            span.span_context.trace_id(),
            producer.span_context.trace_id(),
            "one trace"
        );
        assert_eq!(span.parent_span_id, producer.span_context.span_id());
        assert!(span.parent_span_is_remote, "the parent came from the row");
        assert_eq!(span.status, Status::Ok);
        for (key, value) in [
            ("messaging.system", "kafka"),
            ("messaging.operation.type", "send"),
            ("messaging.destination.name", "outbox.event.order"),
            ("outbox.outcome", "delivered"),
        ] {
            assert_eq!(attribute(span, key), Some(value.into()), "{key}");
        }
        assert_eq!(
            delivered.headers["traceparent"],
            traceparent_of(span),
            "the message carries the publish span"
        );

        // A consumer continues the trace from the message's headers.
        let consumed = consume(&spans, delivered);
        assert_eq!(consumed.parent_span_id, span.span_context.span_id());
        assert_eq!(
            consumed.span_context.trace_id(),
            producer.span_context.trace_id()
        );
    }
    // The trace shown in docs/operations.md (run with --nocapture).
    eprintln!("{}", render(&spans.finished()));
}

/// What a consumer does with a message: extract its trace context and
/// process it in a span of its own.
fn consume(spans: &Spans, message: &Event) -> SpanData {
    use opentelemetry::propagation::TextMapPropagator;
    use opentelemetry::trace::{Span, Tracer};
    let parent = opentelemetry_sdk::propagation::TraceContextPropagator::new().extract(
        &message
            .headers
            .clone()
            .into_iter()
            .collect::<HashMap<_, _>>(),
    );
    let tracer = spans.provider.tracer("billing");
    let mut span = tracer
        .span_builder(format!(
            "process {}",
            message.destination("outbox.event.{aggregate_type}")
        ))
        .with_kind(SpanKind::Consumer)
        .with_attributes([KeyValue::new(
            "messaging.message.id",
            message.id.to_string(),
        )])
        .start_with_context(&tracer, &parent);
    span.end();
    spans
        .named("process")
        .into_iter()
        .find(|s| attribute(s, "messaging.message.id") == Some(message.id.to_string().into()))
        .unwrap()
}

/// Finished spans as text, one per line, parents before children.
fn render(spans: &[SpanData]) -> String {
    let mut sorted: Vec<&SpanData> = spans.iter().collect();
    sorted.sort_by_key(|s| (s.start_time, s.name.clone()));
    let mut out = format!("trace {}\n", sorted[0].span_context.trace_id());
    for s in sorted {
        let parent = if s.parent_span_id == SpanId::INVALID {
            "-".to_owned()
        } else {
            s.parent_span_id.to_string()
        };
        let status = match &s.status {
            Status::Unset => "unset".to_owned(),
            Status::Ok => "ok".to_owned(),
            Status::Error { description } => format!("error: {description}"),
        };
        let attributes: Vec<String> = s
            .attributes
            .iter()
            // tracing-opentelemetry's bookkeeping, left out for reading
            .filter(|kv| {
                let key = kv.key.as_str();
                !["busy_ns", "idle_ns", "target"].contains(&key)
                    && !key.starts_with("code.")
                    && !key.starts_with("thread.")
            })
            .map(|kv| format!("{}={}", kv.key, kv.value))
            .collect();
        let line = format!(
            "  {:<28} span {} parent {:<16} {:?} {} [{}] {}",
            s.name,
            s.span_context.span_id(),
            parent,
            s.span_kind,
            status,
            s.instrumentation_scope.name(),
            attributes.join(" ")
        );
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

fn remote(trace: &str, span: &str, state: &str) -> Context {
    Context::new().with_remote_span_context(SpanContext::new(
        TraceId::from_hex(trace).unwrap(),
        SpanId::from_hex(span).unwrap(),
        TraceFlags::SAMPLED,
        true,
        state.parse::<TraceState>().unwrap(),
    ))
}

#[tokio::test]
async fn an_explicit_context_is_continued_and_its_tracestate_kept() {
    let ctx = setup().await;
    let spans = Spans::new();
    let trace = "4bf92f3577b34da6a3ce929d0e0e4736";
    let cx = remote(trace, "00f067aa0ba902b7", "congo=t61rcWkgMzE");
    let e = event("a", 1).trace_context(&cx);
    ctx.outbox.enqueue(&ctx.pool, &e).await.unwrap();

    let publisher = TestPublisher::new();
    let relay = relay(&ctx, &publisher, Some(&spans)).await;
    let span = spans.wait_for("publish", 1).await.remove(0);
    relay.shutdown().await.unwrap();

    assert_eq!(span.span_context.trace_id().to_string(), trace);
    assert_eq!(span.parent_span_id.to_string(), "00f067aa0ba902b7");
    let delivered = &publisher.deliveries()[0];
    assert_eq!(delivered.headers["traceparent"], traceparent_of(&span));
    assert_eq!(delivered.headers["tracestate"], "congo=t61rcWkgMzE");
}

#[tokio::test]
async fn a_caller_set_traceparent_wins_over_the_current_span() {
    let ctx = setup().await;
    let spans = Spans::new();
    let layer = tracing_opentelemetry::layer().with_tracer(spans.provider.tracer("shop"));
    let _subscriber = tracing::subscriber::set_default(tracing_subscriber::registry().with(layer));
    let own = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    let e = event("a", 1).header("traceparent", own);
    ctx.outbox
        .enqueue(&ctx.pool, &e)
        .instrument(tracing::info_span!("handler"))
        .await
        .unwrap();
    assert_eq!(stored_traceparent(&ctx, e.id).await.as_deref(), Some(own));
}

#[tokio::test]
async fn events_without_or_with_a_malformed_traceparent_are_published_as_stored_without_a_span() {
    let ctx = setup().await;
    let spans = Spans::new();
    let untraced = event("a", 1);
    let odd = [
        "garbage",
        // all-zero trace id: invalid by the W3C rules
        "00-00000000000000000000000000000000-b7ad6b7169203331-01",
        "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331",
        "",
    ];
    let malformed: Vec<NewEvent> = odd
        .iter()
        .enumerate()
        .map(|(i, tp)| {
            event(&format!("m{i}"), 1)
                .header("traceparent", *tp)
                .header("tracestate", "x=1")
        })
        .collect();
    ctx.outbox.enqueue(&ctx.pool, &untraced).await.unwrap();
    ctx.outbox
        .enqueue_many(&ctx.pool, &malformed)
        .await
        .unwrap();

    let publisher = TestPublisher::new();
    let relay = relay(&ctx, &publisher, Some(&spans)).await;
    wait_until("every event delivered", LONG, || async {
        publisher.delivered_count() == 1 + odd.len()
    })
    .await;
    relay.shutdown().await.unwrap();

    let deliveries = publisher.deliveries();
    let plain = deliveries.iter().find(|d| d.id == untraced.id).unwrap();
    assert!(plain.headers.is_empty(), "{:?}", plain.headers);
    for sent in &malformed {
        let got = deliveries.iter().find(|d| d.id == sent.id).unwrap();
        assert_eq!(got.headers, sent.headers, "forwarded untouched");
    }
    assert!(spans.finished().is_empty(), "{:?}", spans.finished());
}

#[tokio::test]
async fn each_attempt_gets_a_publish_span_ended_with_its_outcome() {
    let ctx = setup().await;
    let spans = Spans::new();
    let cx = remote("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7", "");
    let retried = event("a", 1).trace_context(&cx);
    let rejected = event("b", 1).trace_context(&cx);
    ctx.outbox
        .enqueue_many(&ctx.pool, &[retried.clone(), rejected.clone()])
        .await
        .unwrap();
    let publisher = TestPublisher::new();
    publisher.fail(Match::Id(retried.id), Fail::Retry, Some(1));
    publisher.fail(Match::Id(rejected.id), Fail::Reject, None);

    let relay = relay(&ctx, &publisher, Some(&spans)).await;
    let publishes = spans.wait_for("publish", 3).await;
    relay.shutdown().await.unwrap();

    let of = |id: uuid::Uuid| -> Vec<&SpanData> {
        publishes
            .iter()
            .filter(|s| attribute(s, "messaging.message.id") == Some(id.to_string().into()))
            .collect()
    };
    let outcomes = |spans: Vec<&SpanData>| -> Vec<(String, bool)> {
        spans
            .iter()
            .map(|s| {
                (
                    attribute(s, "outbox.outcome").unwrap().to_string(),
                    matches!(s.status, Status::Error { .. }),
                )
            })
            .collect()
    };
    assert_eq!(
        outcomes(of(retried.id)),
        [("retry".to_owned(), true), ("delivered".to_owned(), false)]
    );
    assert_eq!(outcomes(of(rejected.id)), [("rejected".to_owned(), true)]);
    for span in &publishes {
        assert_eq!(span.parent_span_id.to_string(), "00f067aa0ba902b7");
    }
}

#[tokio::test]
async fn a_relay_without_a_tracer_forwards_the_stored_traceparent_unchanged() {
    let ctx = setup().await;
    let stored = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    let e = event("a", 1).header("traceparent", stored);
    ctx.outbox.enqueue(&ctx.pool, &e).await.unwrap();
    let publisher = TestPublisher::new();
    let relay = relay(&ctx, &publisher, None).await;
    wait_until("the event delivered", LONG, || async {
        publisher.delivered_count() == 1
    })
    .await;
    relay.shutdown().await.unwrap();
    assert_eq!(publisher.deliveries()[0].headers["traceparent"], stored);
}
