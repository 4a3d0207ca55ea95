//! What comes back from the broker: the messages a harness reads back, and
//! the event ids they carry.

use std::collections::{BTreeMap, HashSet};

use uuid::Uuid;

/// The header carrying the event id (see
/// [`Event::message_headers`](outbox::Event::message_headers)).
pub const EVENT_ID_HEADER: &str = "outbox-event-id";

/// One message read back from the broker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Received {
    /// Where it was found: the topic, the routing key, …
    pub destination: String,
    /// The message key, for brokers that have one.
    pub key: Option<String>,
    /// The message headers (string values).
    pub headers: BTreeMap<String, String>,
    /// The message body.
    pub payload: Vec<u8>,
}

impl Received {
    /// The event id from the `outbox-event-id` header.
    pub fn event_id(&self) -> Option<Uuid> {
        self.headers
            .get(EVENT_ID_HEADER)
            .and_then(|v| Uuid::parse_str(v).ok())
    }
}

/// How many distinct event ids are among `received`.
pub fn distinct_events(received: &[Received]) -> usize {
    received
        .iter()
        .filter_map(Received::event_id)
        .collect::<HashSet<_>>()
        .len()
}

/// Gathers messages read back, counting distinct events as they come (for
/// [`Harness::consume`](super::Harness::consume) loops).
#[derive(Debug, Default)]
pub struct Collector {
    messages: Vec<Received>,
    ids: HashSet<Uuid>,
}

impl Collector {
    /// An empty collector.
    pub fn new() -> Collector {
        Collector::default()
    }

    /// Adds a message.
    pub fn push(&mut self, message: Received) {
        if let Some(id) = message.event_id() {
            self.ids.insert(id);
        }
        self.messages.push(message);
    }

    /// Distinct event ids so far.
    pub fn distinct(&self) -> usize {
        self.ids.len()
    }

    /// The messages, in the order they were added.
    pub fn into_messages(self) -> Vec<Received> {
        self.messages
    }
}
