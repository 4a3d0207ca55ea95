//! The relay's defining behaviours, written once and run in every
//! combination (DESIGN.md, "Two delivery modes, one engine"): events as
//! rows or as WAL messages, read by a relay of one source or by a
//! `[[source]]` entry of a relay of many. A behaviour that holds in one
//! combination and not another fails here.
//!
//! Crash recovery is tried with processes (SIGKILL) in
//! `crates/outbox-cli/tests/{crash,wal_mode,sources}.rs`.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::logical::{database, logical_cluster};
use common::{event, position, LONG};
use outbox::sources::{SchemaSelector, SourceDef, Sources, SourcesHandle, SourcesSettings};
use outbox::{
    migrate, DeliveryMode, MigrateOptions, NewEvent, Outbox, Relay, RelayHandle, ReplicationTarget,
    Schema, StatsSnapshot,
};
use outbox_testkit::{assert_delivered_once_in_order, wait_until, Fail, Match, TestPublisher};
use sqlx::{Connection, PgPool};
use uuid::Uuid;

/// How events travel, and which assembly reads them.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Combo {
    Table,
    Wal,
    SourceTable,
    SourceWal,
}

const EVERY: [Combo; 4] = [
    Combo::Table,
    Combo::Wal,
    Combo::SourceTable,
    Combo::SourceWal,
];

impl Combo {
    fn mode(self) -> DeliveryMode {
        match self {
            Combo::Table | Combo::SourceTable => DeliveryMode::Table,
            Combo::Wal | Combo::SourceWal => DeliveryMode::Wal,
        }
    }
}

enum Running {
    One(RelayHandle),
    Many(SourcesHandle),
}

/// A fresh database in `combo`'s mode, its relay publishing to
/// `publisher`, and the producer that writes as that mode's producers do.
struct Harness {
    pool: PgPool,
    outbox: Outbox,
    running: Running,
}

#[cfg(feature = "opentelemetry")]
type Tracer = opentelemetry_sdk::trace::SdkTracer;
#[cfg(not(feature = "opentelemetry"))]
type Tracer = ();

async fn harness(combo: Combo, publisher: &TestPublisher, tracer: Option<Tracer>) -> Harness {
    harness_with(combo, publisher, tracer, |_| {}).await
}

/// [`harness`], with the relay's settings changed by `tune`.
async fn harness_with(
    combo: Combo,
    publisher: &TestPublisher,
    tracer: Option<Tracer>,
    tune: impl FnOnce(&mut outbox::RelayConfig),
) -> Harness {
    let (url, pool) = database(logical_cluster().await).await;
    let mut conn = sqlx::PgConnection::connect(&url).await.unwrap();
    migrate(
        &mut conn,
        &Schema::default(),
        &MigrateOptions {
            mode: Some(combo.mode()),
            ..MigrateOptions::default()
        },
    )
    .await
    .unwrap();
    let target = ReplicationTarget::from_url(&url).unwrap();
    let mut config = common::fast_config(&format!("{combo:?}"));
    tune(&mut config);
    let running = match combo {
        Combo::Table | Combo::Wal => {
            let builder = Relay::builder(pool.clone(), publisher.clone())
                .config(config)
                .replication(target);
            #[cfg(feature = "opentelemetry")]
            let builder = match tracer {
                Some(t) => builder.tracer(t),
                None => builder,
            };
            #[cfg(not(feature = "opentelemetry"))]
            let _ = tracer;
            Running::One(builder.spawn().await.unwrap())
        }
        Combo::SourceTable | Combo::SourceWal => {
            let builder = Sources::builder()
                .source(SourceDef {
                    name: "entry".to_owned(),
                    database: "db".to_owned(),
                    pool: pool.clone(),
                    selector: SchemaSelector::Schema(Schema::default()),
                    config,
                    publisher: Arc::new(publisher.clone()),
                    replication: Some(target),
                })
                .settings(SourcesSettings {
                    check_interval: Duration::from_millis(200),
                    dormant_after: Duration::from_millis(300),
                    ..SourcesSettings::default()
                });
            #[cfg(feature = "opentelemetry")]
            let builder = match tracer {
                Some(t) => builder.tracer(t),
                None => builder,
            };
            #[cfg(not(feature = "opentelemetry"))]
            let _ = tracer;
            Running::Many(builder.spawn().await.unwrap())
        }
    };
    let outbox = match combo.mode() {
        DeliveryMode::Wal => Outbox::new().with_delivery(DeliveryMode::Wal),
        _ => Outbox::new(),
    };
    Harness {
        pool,
        outbox,
        running,
    }
}

impl Harness {
    /// Writes `events` in one transaction, as a producer of the mode does.
    async fn emit(&self, events: &[NewEvent]) {
        let mut tx = self.pool.begin().await.unwrap();
        self.outbox.enqueue_many(&mut *tx, events).await.unwrap();
        tx.commit().await.unwrap();
        self.outbox.wake();
    }

    fn stats(&self) -> StatsSnapshot {
        match &self.running {
            Running::One(r) => r.stats(),
            Running::Many(r) => r.stats(),
        }
    }

    async fn stop(self) {
        match self.running {
            Running::One(r) => {
                r.shutdown().await.unwrap();
            }
            Running::Many(r) => {
                r.shutdown_within(Duration::from_secs(30)).await.unwrap();
            }
        }
    }

    async fn sql(&self, sql: &str) {
        sqlx::query(sql).execute(&self.pool).await.unwrap();
    }

    async fn count(&self, sql: &str) -> i64 {
        sqlx::query_scalar(sql).fetch_one(&self.pool).await.unwrap()
    }
}

fn check(combo: Combo, expected: &[Uuid], publisher: &TestPublisher) {
    let got: Vec<(Uuid, String, i64)> = publisher
        .deliveries()
        .iter()
        .map(|e| (e.id, e.aggregate_id.clone(), position(e)))
        .collect();
    let view: Vec<(Uuid, &str, i64)> = got.iter().map(|(i, a, n)| (*i, a.as_str(), *n)).collect();
    assert_delivered_once_in_order(&format!("{combo:?}"), expected, &view);
}

async fn delivered(combo: Combo, publisher: &TestPublisher, n: usize) {
    wait_until(&format!("{combo:?}: {n} delivered"), LONG, || async {
        publisher.delivered_count() >= n
    })
    .await;
}

fn invoice(agg: &str, n: i64) -> NewEvent {
    NewEvent::json(
        "invoice",
        agg,
        "invoice.issued",
        serde_json::json!({ "n": n }),
    )
}

#[tokio::test]
async fn every_event_is_delivered_once_in_its_aggregates_order() {
    for combo in EVERY {
        let publisher = TestPublisher::new();
        let h = harness(combo, &publisher, None).await;
        let mut expected = Vec::new();
        for n in 1..=20 {
            let events: Vec<NewEvent> = ["a", "b", "c", "d"].iter().map(|a| event(a, n)).collect();
            expected.extend(events.iter().map(|e| e.id));
            h.emit(&events).await;
        }
        delivered(combo, &publisher, expected.len()).await;
        tokio::time::sleep(Duration::from_millis(200)).await;
        check(combo, &expected, &publisher);
        h.stop().await;
    }
}

#[tokio::test]
async fn a_poison_event_is_dead_lettered_and_holds_nothing_but_its_aggregate() {
    for combo in EVERY {
        let publisher = TestPublisher::new();
        let h = harness(combo, &publisher, None).await;
        let poison = event("p", 1);
        publisher.fail(Match::Id(poison.id), Fail::Reject, None);
        let mut ok = vec![];
        h.emit(std::slice::from_ref(&poison)).await;
        for n in 2..=10 {
            let events = [event("p", n), event("ok", n)];
            ok.extend(events.iter().map(|e| e.id));
            h.emit(&events).await;
        }
        delivered(combo, &publisher, ok.len()).await;
        wait_until(&format!("{combo:?}: the dead letter"), LONG, || async {
            h.count("SELECT count(*) FROM outbox_dead_letters").await == 1
        })
        .await;
        let reason: String =
            sqlx::query_scalar("SELECT last_error FROM outbox_events WHERE id = $1")
                .bind(poison.id)
                .fetch_one(&h.pool)
                .await
                .unwrap();
        assert!(reason.contains("test rejection"), "{combo:?}: {reason}");
        check(combo, &ok, &publisher);
        // Retrying the dead letter delivers it.
        let mut conn = h.pool.acquire().await.unwrap();
        publisher.heal();
        let retried = outbox::DeadLetters::new(&Schema::default())
            .retry(&mut conn, &outbox::Selector::ids([poison.id]))
            .await
            .unwrap();
        assert_eq!(retried, 1, "{combo:?}");
        drop(conn);
        h.outbox.wake();
        wait_until(
            &format!("{combo:?}: the retried dead letter"),
            LONG,
            || async { publisher.deliveries().iter().any(|e| e.id == poison.id) },
        )
        .await;
        h.stop().await;
    }
}

#[tokio::test]
async fn a_broker_outage_burns_no_attempts_and_everything_arrives_after_it() {
    for combo in EVERY {
        let publisher = TestPublisher::new();
        let h = harness(combo, &publisher, None).await;
        publisher.set_down(true);
        let mut expected = Vec::new();
        for n in 1..=10 {
            let events = [event("a", n), event("b", n)];
            expected.extend(events.iter().map(|e| e.id));
            h.emit(&events).await;
        }
        wait_until(&format!("{combo:?}: the outage seen"), LONG, || async {
            publisher.unavailable_calls() >= 2
        })
        .await;
        assert_eq!(
            h.count("SELECT count(*) FROM outbox_events WHERE attempts > 0")
                .await,
            0,
            "{combo:?}: no attempt counted"
        );
        publisher.set_down(false);
        delivered(combo, &publisher, expected.len()).await;
        check(combo, &expected, &publisher);
        let stats = h.stats();
        assert_eq!((stats.retried, stats.dead_lettered), (0, 0), "{combo:?}");
        h.stop().await;
    }
}

#[tokio::test]
async fn a_paused_type_and_a_paused_outbox_wait_and_are_delivered_in_order_after_resume() {
    for combo in EVERY {
        let publisher = TestPublisher::new();
        let h = harness(combo, &publisher, None).await;
        h.sql("INSERT INTO outbox_pauses (aggregate_type) VALUES ('order')")
            .await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        let mut expected = Vec::new();
        for n in 1..=5 {
            let events = [event("o", n), invoice("i", n)];
            expected.extend(events.iter().map(|e| e.id));
            h.emit(&events).await;
        }
        delivered(combo, &publisher, 5).await;
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert!(
            publisher
                .deliveries()
                .iter()
                .all(|e| e.aggregate_type == "invoice"),
            "{combo:?}: a paused type was delivered"
        );
        h.sql("DELETE FROM outbox_pauses").await;
        h.outbox.wake();
        delivered(combo, &publisher, 10).await;
        // The whole outbox.
        h.sql("INSERT INTO outbox_pauses (aggregate_type) VALUES (NULL)")
            .await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        for n in 6..=8 {
            let events = [event("o", n), invoice("i", n)];
            expected.extend(events.iter().map(|e| e.id));
            h.emit(&events).await;
        }
        tokio::time::sleep(Duration::from_millis(700)).await;
        assert_eq!(
            publisher.delivered_count(),
            10,
            "{combo:?}: delivered while everything was paused"
        );
        h.sql("DELETE FROM outbox_pauses").await;
        h.outbox.wake();
        delivered(combo, &publisher, expected.len()).await;
        check(combo, &expected, &publisher);
        h.stop().await;
    }
}

#[tokio::test]
async fn payloads_and_headers_arrive_byte_for_byte_as_stored() {
    let payloads = [
        r#"{"emoji": "😀", "quote": "\"", "nl": "a\nb", "tab": "\t"}"#,
        r#"{"big": 123456789012345678901234567890, "float": 1.50, "exp": 1e-7}"#,
        r#"[1, "two", null, true, {"deep": {"deeper": []}}]"#,
        r#""just a string""#,
        "{\"rtl\": \"\u{202e}abc\", \"zero-width\": \"a\u{200b}b\", \"escaped\": \"\\u00e9\"}",
    ];
    for combo in EVERY {
        let publisher = TestPublisher::new();
        let h = harness(combo, &publisher, None).await;
        let mut events = Vec::new();
        for (n, p) in payloads.iter().enumerate() {
            let e = NewEvent::new(
                "order",
                format!("h{n}"),
                "order.odd",
                &serde_json::from_str::<serde_json::Value>(p).unwrap(),
            )
            .unwrap()
            .header("x-quote", "\"a\" 'b'")
            .header("x-unicode", "é 😀 \u{202e}");
            events.push(e);
        }
        h.emit(&events).await;
        delivered(combo, &publisher, events.len()).await;
        for (e, sent) in events.iter().zip(payloads) {
            // What the producer wrote, as the server stores it (the
            // library's JSON value: serde's numbers are f64).
            let written =
                serde_json::to_string(&serde_json::from_str::<serde_json::Value>(sent).unwrap())
                    .unwrap();
            let stored: String = sqlx::query_scalar("SELECT $1::jsonb::text")
                .bind(written)
                .fetch_one(&h.pool)
                .await
                .unwrap();
            let got = publisher
                .deliveries()
                .into_iter()
                .find(|d| d.id == e.id)
                .unwrap();
            assert_eq!(
                got.payload, stored,
                "{combo:?}: the payload as jsonb prints it"
            );
            assert_eq!(got.headers["x-quote"], "\"a\" 'b'", "{combo:?}");
            assert_eq!(got.headers["x-unicode"], "é 😀 \u{202e}", "{combo:?}");
        }
        h.stop().await;
    }
}

#[cfg(feature = "opentelemetry")]
#[tokio::test]
async fn each_publish_is_a_span_whose_parent_is_the_producers() {
    use opentelemetry::trace::TracerProvider as _;
    use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider};
    use tracing::Instrument;
    use tracing_subscriber::layer::SubscriberExt;

    for combo in EVERY {
        let exporter = InMemorySpanExporter::default();
        let provider = SdkTracerProvider::builder()
            .with_simple_exporter(exporter.clone())
            .build();
        let layer = tracing_opentelemetry::layer().with_tracer(provider.tracer("shop"));
        let _subscriber =
            tracing::subscriber::set_default(tracing_subscriber::registry().with(layer));
        let publisher = TestPublisher::new();
        let h = harness(combo, &publisher, Some(provider.tracer("outbox"))).await;
        let e = event("a", 1);
        h.emit(std::slice::from_ref(&e))
            .instrument(tracing::info_span!("place_order"))
            .await;
        let named = |prefix: &str| {
            exporter
                .get_finished_spans()
                .unwrap()
                .into_iter()
                .filter(|s| s.name.starts_with(prefix))
                .collect::<Vec<_>>()
        };
        wait_until(&format!("{combo:?}: the publish span"), LONG, || async {
            !named("publish").is_empty()
        })
        .await;
        let producer = named("place_order").remove(0);
        let publish = named("publish").remove(0);
        assert_eq!(
            publish.parent_span_id,
            producer.span_context.span_id(),
            "{combo:?}"
        );
        assert_eq!(
            publisher.deliveries()[0].headers["traceparent"],
            format!(
                "00-{}-{}-01",
                publish.span_context.trace_id(),
                publish.span_context.span_id()
            ),
            "{combo:?}: the message names the publish span"
        );
        h.stop().await;
    }
}

#[tokio::test]
async fn with_many_calls_in_flight_a_slow_aggregate_holds_only_itself_and_none_has_two_in_flight() {
    for combo in EVERY {
        let publisher = TestPublisher::new();
        publisher.set_concurrent_calls(4);
        // Every publish of aggregate "slow" takes 300 ms.
        publisher.set_slow_aggregate("slow", Duration::from_millis(300));
        let h = harness(combo, &publisher, None).await;
        let mut expected = Vec::new();
        let mut events = vec![event("slow", 1), event("slow", 2)];
        for n in 1..=10 {
            events.extend(["a", "b", "c"].iter().map(|a| event(a, n)));
        }
        expected.extend(events.iter().map(|e| e.id));
        h.emit(&events).await;
        // The other aggregates' thirty events do not wait for "slow": each
        // lane moves as soon as its previous event is acknowledged.
        wait_until(
            &format!("{combo:?}: the fast aggregates, before the slow one's second event"),
            LONG,
            || async {
                let d = publisher.deliveries();
                d.iter().filter(|e| e.aggregate_id != "slow").count() >= 30
            },
        )
        .await;
        let slow_done = publisher
            .deliveries()
            .iter()
            .filter(|e| e.aggregate_id == "slow")
            .count();
        assert!(
            slow_done < 2,
            "{combo:?}: thirty events of other aggregates waited for the slow one's two"
        );
        delivered(combo, &publisher, expected.len()).await;
        check(combo, &expected, &publisher);
        assert!(
            !publisher.saw_one_aggregate_twice_in_flight(),
            "{combo:?}: two events of one aggregate were in flight at once"
        );
        assert!(
            publisher.most_calls_in_flight() > 1 && publisher.most_calls_in_flight() <= 4,
            "{combo:?}: {} calls in flight at most",
            publisher.most_calls_in_flight()
        );
        h.stop().await;
    }
}

/// Small batches, many calls in flight, a slow aggregate and one whose
/// first event is retried: a batch read or claimed while another's calls
/// are still in flight (the table mode lets it join them) never lets an
/// event overtake its aggregate's earlier one, the retried one included,
/// and nothing is lost or sent twice.
#[tokio::test]
async fn across_small_batches_in_flight_a_slow_and_a_retried_aggregate_keep_their_order() {
    for combo in EVERY {
        let publisher = TestPublisher::new();
        publisher.set_concurrent_calls(4);
        publisher.set_slow_aggregate("slow", Duration::from_millis(200));
        let h = harness_with(combo, &publisher, None, |c| c.batch_size = 8).await;
        let mut events = Vec::new();
        for n in 1..=6 {
            events.push(event("slow", n));
            events.push(event("retried", n));
            events.extend(["a", "b", "c", "d", "e", "f"].iter().map(|a| event(a, n)));
        }
        let first_retried = events[1].id;
        publisher.fail(Match::Id(first_retried), Fail::Retry, Some(1));
        let expected: Vec<Uuid> = events.iter().map(|e| e.id).collect();
        h.emit(&events).await;
        delivered(combo, &publisher, expected.len()).await;
        check(combo, &expected, &publisher);
        assert!(
            !publisher.saw_one_aggregate_twice_in_flight(),
            "{combo:?}: two events of one aggregate were in flight at once"
        );
        assert!(
            publisher
                .attempts()
                .iter()
                .any(|a| a.id == first_retried && matches!(a.outcome, outbox::Outcome::Retry(_))),
            "{combo:?}: the retried event was refused once"
        );
        h.stop().await;
    }
}

/// A slow call holds only its aggregate, not the batches after it: with
/// batches of 8, the thirty-one events of other aggregates behind a slow
/// one's (in that batch and the three after it) are delivered while the
/// slow call is still in flight. The batch claimed, or read from the
/// slot, while the first one's calls are in flight joins it.
#[tokio::test]
async fn a_slow_call_holds_only_its_aggregate_not_the_batches_after_it() {
    for combo in EVERY {
        let publisher = TestPublisher::new();
        publisher.set_concurrent_calls(4);
        publisher.set_slow_aggregate("slow", Duration::from_secs(3));
        let h = harness_with(combo, &publisher, None, |c| c.batch_size = 8).await;
        let mut events = vec![event("slow", 1)];
        events.extend((1..=31).map(|a| event(&format!("a{a}"), 1)));
        let expected: Vec<Uuid> = events.iter().map(|e| e.id).collect();
        h.emit(&events).await;
        wait_until(
            &format!("{combo:?}: the other aggregates' 31 events"),
            LONG,
            || async {
                let d = publisher.deliveries();
                d.iter().filter(|e| e.aggregate_id != "slow").count() >= 31
            },
        )
        .await;
        let slow_done = publisher
            .deliveries()
            .iter()
            .filter(|e| e.aggregate_id == "slow")
            .count();
        assert_eq!(
            slow_done, 0,
            "{combo:?}: the three batches after the slow call's waited for it"
        );
        delivered(combo, &publisher, expected.len()).await;
        check(combo, &expected, &publisher);
        assert!(
            !publisher.saw_one_aggregate_twice_in_flight(),
            "{combo:?}: two events of one aggregate were in flight at once"
        );
        // Batches published as one are still reported as they were read
        // or claimed: four of eight.
        wait_until(
            &format!("{combo:?}: 32 reported delivered"),
            LONG,
            || async { h.stats().delivered >= 32 },
        )
        .await;
        let stats = h.stats();
        assert_eq!(stats.delivered, 32, "{combo:?}: {stats:?}");
        assert!(stats.batches >= 4, "{combo:?}: {stats:?}");
        h.stop().await;
    }
}

/// A pause that lands while a slow call is in flight holds what commits
/// after it: the batch read or claimed meanwhile joins only what the
/// pause lets through, and the paused type's events wait, in order, until
/// it is lifted.
#[tokio::test]
async fn a_pause_set_while_a_slow_call_is_in_flight_holds_what_commits_after_it() {
    for combo in EVERY {
        let publisher = TestPublisher::new();
        publisher.set_concurrent_calls(4);
        publisher.set_slow_aggregate("slow", Duration::from_secs(2));
        let h = harness_with(combo, &publisher, None, |c| c.batch_size = 8).await;
        let first: Vec<NewEvent> = std::iter::once(event("slow", 1))
            .chain((1..=7).map(|a| invoice(&format!("f{a}"), 1)))
            .collect();
        let mut expected: Vec<Uuid> = first.iter().map(|e| e.id).collect();
        h.emit(&first).await;
        wait_until(&format!("{combo:?}: the seven fast ones"), LONG, || async {
            publisher.delivered_count() >= 7
        })
        .await;
        // The slow call is in flight.
        h.sql("INSERT INTO outbox_pauses (aggregate_type) VALUES ('order')")
            .await;
        let later: Vec<NewEvent> = (1..=4)
            .flat_map(|n| [event("o", n), invoice("i", n)])
            .collect();
        expected.extend(later.iter().map(|e| e.id));
        h.emit(&later).await;
        wait_until(
            &format!("{combo:?}: the slow one and the four invoices after the pause"),
            LONG,
            || async { publisher.delivered_count() >= 12 },
        )
        .await;
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert!(
            publisher.deliveries().iter().all(|e| e.aggregate_id != "o"),
            "{combo:?}: an event of the paused type was delivered"
        );
        h.sql("DELETE FROM outbox_pauses").await;
        h.outbox.wake();
        delivered(combo, &publisher, expected.len()).await;
        check(combo, &expected, &publisher);
        h.stop().await;
    }
}

/// An aggregate whose event waits for its retry holds its later events
/// behind it, also those committed while another batch's slow call is in
/// flight: the batch read or claimed meanwhile does not let them
/// overtake the retry.
#[tokio::test]
async fn an_event_committed_during_a_slow_call_waits_behind_its_aggregates_retry() {
    for combo in EVERY {
        let publisher = TestPublisher::new();
        publisher.set_concurrent_calls(4);
        publisher.set_slow_aggregate("slow", Duration::from_secs(2));
        let h = harness_with(combo, &publisher, None, |c| {
            c.batch_size = 8;
            c.backoff_base_ms = 3_000;
            c.backoff_max_ms = 3_000;
        })
        .await;
        let retried = event("r", 1);
        publisher.fail(Match::Id(retried.id), Fail::Retry, Some(1));
        let mut expected = vec![retried.id];
        h.emit(std::slice::from_ref(&retried)).await;
        wait_until(&format!("{combo:?}: the first try"), LONG, || async {
            !publisher.attempts().is_empty()
        })
        .await;
        let first: Vec<NewEvent> = std::iter::once(event("slow", 1))
            .chain((1..=7).map(|a| invoice(&format!("f{a}"), 1)))
            .collect();
        expected.extend(first.iter().map(|e| e.id));
        h.emit(&first).await;
        wait_until(&format!("{combo:?}: the seven fast ones"), LONG, || async {
            publisher.delivered_count() >= 7
        })
        .await;
        // The slow call is in flight; "r" waits for its retry.
        let behind = event("r", 2);
        expected.push(behind.id);
        h.emit(std::slice::from_ref(&behind)).await;
        delivered(combo, &publisher, expected.len()).await;
        check(combo, &expected, &publisher);
        h.stop().await;
    }
}

/// What commits while a short batch's slow call is in flight is delivered
/// before that call ends: the stream is read on, or the next claim is made
/// a pace later, and joins the lanes.
#[tokio::test]
async fn what_commits_during_a_slow_call_of_a_short_batch_does_not_wait_for_it() {
    for combo in EVERY {
        let publisher = TestPublisher::new();
        publisher.set_concurrent_calls(4);
        publisher.set_slow_aggregate("slow", Duration::from_secs(3));
        // Claims a pace apart: 300 ms, so that what the test commits next
        // is there for the table mode's next claim on a loaded machine.
        let h = harness_with(combo, &publisher, None, |c| c.latency_budget_ms = 300).await;
        let first = [event("slow", 1), event("f1", 1), event("f2", 1)];
        let mut expected: Vec<Uuid> = first.iter().map(|e| e.id).collect();
        h.emit(&first).await;
        wait_until(&format!("{combo:?}: the two fast ones"), LONG, || async {
            publisher.delivered_count() >= 2
        })
        .await;
        // The slow call is in flight.
        let later: Vec<NewEvent> = (1..=4).map(|a| event(&format!("g{a}"), 1)).collect();
        expected.extend(later.iter().map(|e| e.id));
        h.emit(&later).await;
        wait_until(
            &format!("{combo:?}: the four committed later"),
            LONG,
            || async { publisher.delivered_count() >= 6 },
        )
        .await;
        assert!(
            publisher
                .deliveries()
                .iter()
                .all(|e| e.aggregate_id != "slow"),
            "{combo:?}: what committed later waited for the slow call"
        );
        delivered(combo, &publisher, expected.len()).await;
        check(combo, &expected, &publisher);
        h.stop().await;
    }
}
