//! Destination templates through a real publisher: the Redis stream key
//! filled in from the event's fields and headers on a real `redis-server`
//! (started by the test kit; `OUTBOX_SKIP_BROKER_TESTS=redis` skips it).
#![cfg(feature = "redis")]

use outbox::{Outcome, Publisher};
use outbox_publishers::redis::{RedisConfig, RedisPublisher};
use outbox_testkit::brokers::redis::client;
use outbox_testkit::brokers::redis::RedisServer;
use outbox_testkit::brokers::Broker;
use outbox_testkit::conformance::{self, Scope};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_header_placeholder_picks_the_stream_and_a_missing_header_is_rejected() {
    let Some(redis) = Broker::<RedisServer>::private().await else {
        return;
    };
    let url = redis.lock().url();
    let p = RedisPublisher::new(RedisConfig {
        url: url.clone(),
        stream: "{aggregate_type}:{header.tenant}:{header.region:-eu}".into(),
        ..RedisConfig::default()
    })
    .unwrap();
    let scope = Scope::new("templates");
    let with = |n, headers: &[(&str, &str)]| {
        let mut e = conformance::event(&scope, "order-1", n);
        for (k, v) in headers {
            e.headers.insert((*k).into(), (*v).into());
        }
        e
    };
    let mut overridden = with(4, &[]);
    overridden.topic = Some(scope.override_destination());
    let batch = [
        with(1, &[("tenant", "acme")]),
        with(2, &[("region", "us")]),
        with(3, &[("tenant", "acme"), ("region", "us")]),
        overridden,
    ];
    let outcomes = p.publish(&batch).await.unwrap();
    assert_eq!(outcomes[0], Outcome::Delivered);
    let Outcome::Rejected(why) = &outcomes[1] else {
        panic!("an event without the header is rejected: {outcomes:?}");
    };
    assert!(
        why.contains("\"tenant\"") && why.contains("{header.tenant:-DEFAULT}"),
        "{why}"
    );
    assert_eq!(outcomes[2..], [Outcome::Delivered, Outcome::Delivered]);

    let mut conn = client::connect(&url).await;
    let ids_in = |entries: Vec<client::Entry>| -> Vec<String> {
        entries.iter().filter_map(|e| e.text("id")).collect()
    };
    let t = scope.aggregate_type();
    for (stream, event) in [
        (format!("{t}:acme:eu"), &batch[0]),
        (format!("{t}:acme:us"), &batch[2]),
        (scope.override_destination(), &batch[3]),
    ] {
        let got = ids_in(client::read_stream(&mut conn, &stream).await);
        assert_eq!(got, [event.id.to_string()], "stream {stream}");
    }
    assert!(client::read_stream(&mut conn, &format!("{t}::us"))
        .await
        .is_empty());
}
