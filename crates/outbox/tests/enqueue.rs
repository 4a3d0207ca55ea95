//! The producer side: atomic with the caller's transaction, one statement
//! for many events, clear errors for bad input.

mod common;

use common::{count, event, fast_config, start_relay, EVENTS, LONG};
use outbox::NewEvent;
use outbox_testkit::{wait_until, TestPublisher};
use serde_json::json;

#[tokio::test]
async fn rollback_leaves_no_event_and_commit_leads_to_delivery() {
    let ctx = common::setup().await;
    common::execute(&ctx.pool, "CREATE TABLE orders (id BIGINT PRIMARY KEY)").await;

    let mut tx = ctx.pool.begin().await.unwrap();
    common::execute(&mut *tx, "INSERT INTO orders VALUES (1)").await;
    let rolled_back = ctx.outbox.enqueue(&mut *tx, &event("1", 1)).await.unwrap();
    tx.rollback().await.unwrap();

    let mut tx = ctx.pool.begin().await.unwrap();
    common::execute(&mut *tx, "INSERT INTO orders VALUES (2)").await;
    let committed = ctx.outbox.enqueue(&mut *tx, &event("2", 1)).await.unwrap();
    tx.commit().await.unwrap();
    ctx.outbox.wake();

    assert_eq!(count(&ctx.pool, EVENTS).await, 1);
    let publisher = TestPublisher::new();
    let relay = start_relay(&ctx, &publisher, fast_config("r1")).await;
    wait_until("the committed event to be delivered", LONG, || async {
        publisher.delivered_count() >= 1
    })
    .await;
    // Give a stray delivery of the rolled-back event every chance to show up.
    let stats = relay.shutdown().await.unwrap();
    let ids: Vec<_> = publisher.deliveries().iter().map(|e| e.id).collect();
    assert_eq!(ids, vec![committed]);
    assert!(!ids.contains(&rolled_back));
    assert_eq!(stats.delivered, 1);
    assert_eq!(count(&ctx.pool, EVENTS).await, 0);
    assert_eq!(count(&ctx.pool, "SELECT count(*) FROM orders").await, 1);
}

#[tokio::test]
async fn enqueue_many_is_one_statement_in_the_given_order() {
    let ctx = common::setup().await;
    let events: Vec<NewEvent> = (1..=500)
        .map(|n| event(&format!("a{}", n % 7), n))
        .collect();
    let mut tx = ctx.pool.begin().await.unwrap();
    let ids = ctx.outbox.enqueue_many(&mut *tx, &events).await.unwrap();
    tx.commit().await.unwrap();
    assert_eq!(ids.len(), 500);
    let rows: Vec<(uuid::Uuid, serde_json::Value)> =
        sqlx::query_as("SELECT id, payload FROM outbox_events ORDER BY seq")
            .fetch_all(&ctx.pool)
            .await
            .unwrap();
    let got: Vec<i64> = rows.iter().map(|(_, p)| p["n"].as_i64().unwrap()).collect();
    assert_eq!(got, (1..=500).collect::<Vec<_>>());
    assert_eq!(rows.iter().map(|(id, _)| *id).collect::<Vec<_>>(), ids);
    // One INSERT statement: the whole batch shares one transaction id and
    // one command id.
    let cmds: i64 = count(
        &ctx.pool,
        "SELECT count(DISTINCT cmin::text) FROM outbox_events",
    )
    .await;
    assert_eq!(cmds, 1);
}

#[tokio::test]
async fn headers_topic_and_typed_payloads_round_trip() {
    #[derive(serde::Serialize)]
    struct Created {
        order_id: u64,
        total_cents: i64,
    }
    let ctx = common::setup().await;
    let e = NewEvent::new(
        "order",
        "7",
        "order.created",
        &Created {
            order_id: 7,
            total_cents: 1250,
        },
    )
    .unwrap()
    .header(
        "traceparent",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
    )
    .topic("orders.v2");
    ctx.outbox.enqueue(&ctx.pool, &e).await.unwrap();
    let publisher = TestPublisher::new();
    let relay = start_relay(&ctx, &publisher, fast_config("r1")).await;
    wait_until("delivery", LONG, || async {
        publisher.delivered_count() == 1
    })
    .await;
    relay.shutdown().await.unwrap();
    let got = &publisher.deliveries()[0];
    assert_eq!(got.id, e.id);
    assert_eq!(got.topic.as_deref(), Some("orders.v2"));
    assert_eq!(
        got.destination("outbox.event.{aggregate_type}"),
        "orders.v2"
    );
    assert_eq!(
        got.headers.get("traceparent").map(String::as_str),
        Some("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
    );
    let payload: serde_json::Value = serde_json::from_str(&got.payload).unwrap();
    assert_eq!(payload, json!({"order_id": 7, "total_cents": 1250}));
    let headers = got.message_headers();
    assert!(headers.contains(&("outbox-event-id".to_owned(), e.id.to_string())));
    assert!(headers.contains(&("outbox-aggregate-id".to_owned(), "7".to_owned())));
}

#[tokio::test]
async fn bad_input_is_refused_before_anything_is_written() {
    let ctx = common::setup().await;
    let mut tx = ctx.pool.begin().await.unwrap();
    let cases: Vec<(NewEvent, &str)> = vec![
        (
            NewEvent::json("order", "", "order.created", json!({})),
            "aggregate_id",
        ),
        (
            NewEvent::json("", "1", "order.created", json!({})),
            "aggregate_type",
        ),
        (
            NewEvent::json("order", "1", "e".repeat(101), json!({})),
            "event_type",
        ),
        (
            NewEvent::json("order", "x".repeat(101), "e", json!({})),
            "aggregate_id",
        ),
        (
            NewEvent::json("order", "1", "e", json!({"a": "nul\u{0}"})),
            "payload",
        ),
        (
            NewEvent::json("order", "1", "e", json!({})).topic("t".repeat(256)),
            "topic",
        ),
        (
            NewEvent::json("order", "1", "e", json!({})).header("", "v"),
            "header",
        ),
    ];
    for (e, field) in &cases {
        let err = ctx.outbox.enqueue(&mut *tx, e).await.unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains(field), "{msg:?} should name {field}");
        assert!(matches!(err, outbox::Error::Invalid { .. }), "{err:?}");
        assert!(!err.is_retriable());
    }
    // A map with non-string keys is not a JSON object: serde refuses it.
    let mut bad = std::collections::HashMap::new();
    bad.insert(vec![1u8], 1);
    let err = NewEvent::new("order", "1", "e", &bad).unwrap_err();
    assert!(err.to_string().contains("payload"), "{err}");

    // A bad event anywhere in a batch stops the whole batch, named by index.
    let batch = vec![event("1", 1), NewEvent::json("order", "", "e", json!({}))];
    let err = ctx
        .outbox
        .enqueue_many(&mut *tx, &batch)
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("events[1].aggregate_id"), "{err}");

    // The transaction is still usable: nothing was sent to the server.
    ctx.outbox.enqueue(&mut *tx, &event("ok", 1)).await.unwrap();
    tx.commit().await.unwrap();
    assert_eq!(count(&ctx.pool, EVENTS).await, 1);
}
