//! Paused delivery (migration 10): a paused aggregate type, or the whole
//! outbox, is not delivered while paused, and is delivered in order once
//! resumed; other aggregate types flow meanwhile.

mod common;

use std::time::Duration;

use common::{event, execute, fast_config, start_relay, wait_for_count, EVENTS};
use outbox::NewEvent;
use outbox_testkit::TestPublisher;

fn invoice(agg: &str, n: i64) -> NewEvent {
    NewEvent::json(
        "invoice",
        agg,
        "invoice.issued",
        serde_json::json!({ "n": n }),
    )
}

const ORDERS: &str = "SELECT count(*) FROM outbox_events WHERE aggregate_type = 'order'";
const INVOICES: &str = "SELECT count(*) FROM outbox_events WHERE aggregate_type = 'invoice'";

#[tokio::test]
async fn a_paused_aggregate_type_waits_and_is_delivered_in_order_after_resume() {
    let ctx = common::setup().await;
    execute(
        &ctx.pool,
        "INSERT INTO outbox_pauses (aggregate_type) VALUES ('order')",
    )
    .await;
    let mut events: Vec<NewEvent> = (1..=20).map(|n| event("o-1", n)).collect();
    events.extend((1..=20).map(|n| event("o-2", n)));
    events.extend((1..=10).map(|n| invoice("i-1", n)));
    ctx.outbox.enqueue_many(&ctx.pool, &events).await.unwrap();

    let publisher = TestPublisher::new();
    let relay = start_relay(&ctx, &publisher, fast_config("r1")).await;
    wait_for_count(&ctx.pool, "the invoices to be delivered", INVOICES, 0).await;
    // More claims happen after the first ones: an invoice enqueued now is
    // delivered, the paused orders still are not.
    ctx.outbox
        .enqueue(&ctx.pool, &invoice("i-2", 1))
        .await
        .unwrap();
    ctx.outbox.wake();
    wait_for_count(&ctx.pool, "the late invoice to be delivered", INVOICES, 0).await;
    assert_eq!(common::count(&ctx.pool, ORDERS).await, 40);
    assert!(
        publisher
            .deliveries()
            .iter()
            .all(|e| e.aggregate_type == "invoice"),
        "a paused aggregate type was delivered"
    );

    execute(
        &ctx.pool,
        "DELETE FROM outbox_pauses WHERE aggregate_type = 'order'",
    )
    .await;
    ctx.outbox.wake();
    wait_for_count(
        &ctx.pool,
        "the orders to be delivered after resume",
        EVENTS,
        0,
    )
    .await;
    relay.shutdown().await.unwrap();
    let deliveries = publisher.deliveries();
    assert_eq!(deliveries.len(), 51);
    common::assert_first_deliveries_in_order(&deliveries);
}

#[tokio::test]
async fn pausing_the_whole_outbox_stops_every_claim_until_resumed() {
    let ctx = common::setup().await;
    let publisher = TestPublisher::new();
    let relay = start_relay(&ctx, &publisher, fast_config("r1")).await;
    ctx.outbox
        .enqueue(&ctx.pool, &event("before", 1))
        .await
        .unwrap();
    ctx.outbox.wake();
    wait_for_count(&ctx.pool, "the first event to be delivered", EVENTS, 0).await;

    execute(
        &ctx.pool,
        "INSERT INTO outbox_pauses (aggregate_type) VALUES (NULL)",
    )
    .await;
    // A pause of one type and of everything are distinct scopes.
    execute(
        &ctx.pool,
        "INSERT INTO outbox_pauses (aggregate_type) VALUES ('')",
    )
    .await;
    let events: Vec<NewEvent> = (1..=10)
        .map(|n| event("a", n))
        .chain((1..=10).map(|n| invoice("b", n)))
        .collect();
    ctx.outbox.enqueue_many(&ctx.pool, &events).await.unwrap();
    ctx.outbox.wake();
    // An observation window, not a synchronisation: the relay polls every
    // 50 ms at most, so it has looked a dozen times by the end of it.
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(publisher.deliveries().len(), 1, "delivered while paused");
    assert_eq!(common::count(&ctx.pool, EVENTS).await, 20);

    execute(
        &ctx.pool,
        "DELETE FROM outbox_pauses WHERE aggregate_type IS NULL",
    )
    .await;
    ctx.outbox.wake();
    wait_for_count(
        &ctx.pool,
        "everything to be delivered after resume",
        EVENTS,
        0,
    )
    .await;
    relay.shutdown().await.unwrap();
    let deliveries = publisher.deliveries();
    assert_eq!(deliveries.len(), 21);
    common::assert_first_deliveries_in_order(&deliveries);
}
