//! What the publishers' unit tests share; `tests/cloudevents_sdk.rs`
//! includes this file too, for its event.
// Each helper serves the tests of the publishers built with this feature set.
#![allow(dead_code)]

use std::fmt::Debug;

use outbox::{Event, Publisher, Unavailable};

/// An `order.created` event of aggregate `order`/`aggregate_id`, with
/// `headers`, no topic override and a payload a float parser would change
/// (`1e400`): publishers must send it as stored.
pub(crate) fn event(aggregate_id: &str, headers: &[(&str, &str)]) -> Event {
    Event {
        id: uuid::Uuid::now_v7(),
        seq: 1,
        aggregate_type: "order".into(),
        aggregate_id: aggregate_id.into(),
        event_type: "order.created".into(),
        payload: r#"{"n": 1e400}"#.into(),
        headers: headers
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        topic: None,
        attempts: 0,
        created_at: chrono::Utc::now(),
        partition: 0,
    }
}

/// A local port nothing listens on (bound, then let go).
pub(crate) fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Publishes two events with `p`, whose broker cannot be reached: the call
/// is an outage (no event is blamed) whose message names `place`, and
/// neither it, the health check's error nor `p`'s `Debug` shows any of
/// `secrets`. Returns the health check's error.
pub(crate) async fn assert_unreachable_is_an_outage(
    p: &(impl Publisher + Debug),
    place: &str,
    secrets: &[&str],
) -> Unavailable {
    let e = p
        .publish(&[event("1", &[]), event("2", &[])])
        .await
        .unwrap_err();
    assert!(e.message.contains(place), "{e} should name {place}");
    let health = p.health().await.unwrap_err();
    let debug = format!("{p:?}");
    for secret in secrets {
        for shown in [&e.message, &health.message, &debug] {
            assert!(!shown.contains(secret), "{shown} shows {secret}");
        }
    }
    health
}
