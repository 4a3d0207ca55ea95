//! What every message of a run is, whichever side sends it: the events'
//! type names, the identity headers, the window of messages in flight.
//! Imports nothing of its siblings, which all read it.

use uuid::Uuid;

/// The relay's events' aggregate type.
pub const AGGREGATE_TYPE: &str = "bench";
/// The relay's events' event type.
pub const EVENT_TYPE: &str = "e2e";

/// Messages in flight (the relay's default batch size).
pub const WINDOW: u64 = 500;

/// One reference message: the event id, its aggregate, its body.
pub type Message = (Uuid, u64, String);

/// The identity headers the relay's messages carry (`outbox-*`, as
/// `Event::message_headers` names them) for an event `id` of aggregate `a`.
pub fn identity(id: Uuid, a: u64) -> [(&'static str, String); 4] {
    [
        ("outbox-event-id", id.to_string()),
        ("outbox-event-type", EVENT_TYPE.to_owned()),
        ("outbox-aggregate-type", AGGREGATE_TYPE.to_owned()),
        ("outbox-aggregate-id", a.to_string()),
    ]
}
