//! What one message of a call came to, before the call is settled: the
//! NATS and Redis publishers sort each answer into this one shape.

use outbox::Outcome;

/// What one publish came to, before its call is settled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Answer {
    /// An outcome for the event.
    Outcome(Outcome),
    /// Not this event's fault: no answer from the server, a failed
    /// connection, or a server that refuses every write until an operator
    /// acts (authentication, permissions). An outage.
    Transport(String),
}
