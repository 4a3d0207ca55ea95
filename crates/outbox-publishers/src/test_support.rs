//! What the publishers' unit tests share.

use outbox::Event;

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
