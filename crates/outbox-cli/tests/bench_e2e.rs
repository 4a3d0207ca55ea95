//! `outbox bench e2e` through each broker at a small size: the bench starts
//! the broker (the test kit's launchers; a webhook receiver of its own for
//! `http`), and its consumer must read every event back, each aggregate's
//! in order, for the relay's drain, the broker's own client and a steady
//! rate. Speed is never asserted (shared machines are noisy).
//!
//! `OUTBOX_SKIP_BROKER_TESTS` naming a broker (or `all`) skips its test.

mod common;

use serde_json::Value;

/// Runs the bench through `publisher` at a small size; `None` if the test
/// kit is told to skip `broker` (`None`: a receiver of the bench's own).
async fn small_run(broker: Option<&str>, publisher: &str) -> Option<Value> {
    if let Some(broker) = broker.filter(|b| outbox_testkit::brokers::skipped(b)) {
        eprintln!(
            "skipped: {} names {broker}",
            outbox_testkit::brokers::SKIP_ENV
        );
        return None;
    }
    let (_db, v, stdout) = common::bench_fresh(&format!(
        "e2e --publisher {publisher} --events 2000 --aggregates 50 --rate 200 --seconds 2 --idle-secs 1"
    ))
    .await;
    assert!(stdout.contains("drain: relay"), "{stdout}");
    Some(v)
}

/// The consumer saw every event of every run, none out of its aggregate's
/// order (the bench fails the run otherwise; this checks what it says).
fn assert_complete_and_in_order(v: &Value, broker: &str) {
    assert_eq!(v["scenario"], "e2e");
    assert_eq!(v["broker"], broker);
    let drain = &v["drain"];
    assert_eq!(drain["delivered"], 2000, "{drain}");
    assert_eq!(drain["reference_delivered"], 2000, "{drain}");
    assert_eq!(drain["out_of_order"], 0, "{drain}");
    for k in ["relay_events_per_s", "reference_events_per_s", "ratio"] {
        assert!(drain[k].as_f64().is_some_and(|x| x > 0.0), "{k}: {drain}");
    }
    let runs = v["latency"].as_array().expect("latency runs");
    assert_eq!(runs.len(), 1, "{v}");
    let run = &runs[0];
    assert_eq!(run["rate"], 200);
    assert_eq!(run["events"], 400);
    assert_eq!(run["delivered"], 400, "{run}");
    assert_eq!(run["out_of_order"], 0, "{run}");
    let p = |k: &str| run[k].as_f64().unwrap();
    assert!(
        p("p50_ms") <= p("p99_ms") && p("p99_ms") <= p("max_ms"),
        "{run}"
    );
    assert!(run["cpu"]["relay_us_per_event"].as_f64().is_some(), "{run}");
}

#[tokio::test]
async fn every_event_reaches_a_redis_consumer_in_aggregate_order() {
    if let Some(v) = small_run(Some("redis"), "redis").await {
        assert_complete_and_in_order(&v, "redis");
        assert_eq!(v["broker_started"], true);
    }
}

/// Pointed at a running broker, the bench uses it instead of starting one.
#[tokio::test]
async fn a_running_broker_named_by_its_url_is_used() {
    let Some(server) = outbox_testkit::brokers::redis::Redis::start_or_skip_blocking().await else {
        return;
    };
    let url = server.url();
    let v = small_run(Some("redis"), &url).await.expect("not skipped");
    assert_complete_and_in_order(&v, "redis");
    assert_eq!(v["broker_started"], false);
}

#[tokio::test]
async fn every_event_reaches_the_webhook_receiver_in_aggregate_order() {
    // The receiver is the bench's own: nothing to skip.
    let v = small_run(None, "http").await.expect("never skipped");
    assert_complete_and_in_order(&v, "http");
}

#[tokio::test]
async fn every_event_reaches_a_nats_consumer_in_aggregate_order() {
    if let Some(v) = small_run(Some("nats"), "nats").await {
        assert_complete_and_in_order(&v, "nats");
    }
}

#[tokio::test]
async fn every_event_reaches_a_rabbitmq_consumer_in_aggregate_order() {
    if let Some(v) = small_run(Some("rabbitmq"), "amqp").await {
        assert_complete_and_in_order(&v, "rabbitmq");
    }
}

/// Through tansu, a real Kafka-protocol broker (`OUTBOX_TANSU_BIN`;
/// `OUTBOX_SKIP_BROKER_TESTS=kafka-real` skips it).
#[tokio::test]
async fn every_event_reaches_a_kafka_consumer_in_aggregate_order() {
    if let Some(v) = small_run(Some("kafka-real"), "kafka").await {
        assert_complete_and_in_order(&v, "kafka");
        assert_eq!(v["broker_started"], true);
    }
}
