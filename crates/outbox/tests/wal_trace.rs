//! W3C trace context through the WAL mode (feature `opentelemetry`), as
//! through the table: the producer's span travels in the message, the
//! relay's publish span is its child, and the published event names the
//! publish span.
#![cfg(feature = "opentelemetry")]

mod common;

use common::logical::{database, logical_cluster};
use common::{event, LONG};
use opentelemetry::trace::{SpanKind, TracerProvider as _};
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData};
use outbox::{migrate, DeliveryMode, MigrateOptions, Outbox, Relay, ReplicationTarget, Schema};
use outbox_testkit::{wait_until, TestPublisher};
use sqlx::Connection;
use tracing::Instrument;
use tracing_subscriber::layer::SubscriberExt;

fn named(exporter: &InMemorySpanExporter, prefix: &str) -> Vec<SpanData> {
    exporter
        .get_finished_spans()
        .unwrap()
        .into_iter()
        .filter(|s| s.name.starts_with(prefix))
        .collect()
}

#[tokio::test]
async fn a_wal_mode_event_is_published_in_a_span_whose_parent_is_the_producers() {
    let (url, pool) = database(logical_cluster().await).await;
    let mut conn = sqlx::PgConnection::connect(&url).await.unwrap();
    migrate(
        &mut conn,
        &Schema::default(),
        &MigrateOptions {
            mode: Some(DeliveryMode::Wal),
            slot: Some(format!("outbox_{}", url.rsplit('/').next().unwrap())),
            ..MigrateOptions::default()
        },
    )
    .await
    .unwrap();
    let exporter = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(exporter.clone())
        .build();
    let layer = tracing_opentelemetry::layer().with_tracer(provider.tracer("shop"));
    let _subscriber = tracing::subscriber::set_default(tracing_subscriber::registry().with(layer));

    let publisher = TestPublisher::new();
    let relay = Relay::builder(pool.clone(), publisher.clone())
        .config(common::fast_config("traced"))
        .replication(ReplicationTarget::from_url(&url).unwrap())
        .tracer(provider.tracer("outbox"))
        .spawn()
        .await
        .unwrap();
    let outbox = Outbox::new().with_delivery(DeliveryMode::Wal);
    let e = event("a", 1);
    async {
        let mut tx = pool.begin().await.unwrap();
        outbox.enqueue(&mut *tx, &e).await.unwrap();
        tx.commit().await.unwrap();
    }
    .instrument(tracing::info_span!("place_order"))
    .await;
    wait_until("the publish span", LONG, || async {
        !named(&exporter, "publish").is_empty()
    })
    .await;
    relay.shutdown().await.unwrap();
    let producer = named(&exporter, "place_order").remove(0);
    let publish = named(&exporter, "publish").remove(0);
    assert_eq!(publish.span_kind, SpanKind::Producer);
    assert_eq!(
        publish.span_context.trace_id(),
        producer.span_context.trace_id(),
        "one trace"
    );
    assert_eq!(publish.parent_span_id, producer.span_context.span_id());
    let delivered = publisher.deliveries();
    assert_eq!(delivered.len(), 1);
    assert_eq!(
        delivered[0].headers["traceparent"],
        format!(
            "00-{}-{}-01",
            publish.span_context.trace_id(),
            publish.span_context.span_id()
        ),
        "the message carries the publish span"
    );
}
