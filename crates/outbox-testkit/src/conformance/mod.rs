//! The publisher conformance suite: what every [`Publisher`] must do against
//! its real broker, checked by reading the messages back from the broker.
//!
//! A publisher's tests implement [`Harness`] (how to build the publisher,
//! how to read messages back, how to stop and start the broker) and invoke
//! [`conformance_suite!`](crate::conformance_suite), which writes one test
//! per case; a case the publisher cannot run returns early by its
//! [`Capabilities`]. The cases:
//!
//! | case | needs |
//! | --- | --- |
//! | [`delivers_a_batch`] | — |
//! | [`maps_headers_key_and_destination`] | — |
//! | [`keeps_aggregate_order`] | PostgreSQL |
//! | [`drains_a_large_batch`] | PostgreSQL |
//! | [`delivers_every_event_as_stored`] | PostgreSQL |
//! | [`rejects_an_oversized_message`] | PostgreSQL, [`Capabilities::oversized_payload_bytes`] |
//! | [`outage_burns_no_attempts`] | PostgreSQL, [`Capabilities::stop_start`] |
//! | [`survives_a_broker_restart`] | PostgreSQL, [`Capabilities::keeps_data_across_restart`] |
//!
//! Cases that go through PostgreSQL run a real [`Relay`](outbox::Relay) on
//! the pool they are given (migrating it first), so they check the
//! publisher and the relay together: outcomes, dead letters, attempts, and
//! what reached the broker. Each case uses its own [`Scope`] (fresh
//! aggregate type, event type and destinations), so cases may share a
//! broker and run in parallel, except those that stop it.
//!
//! The suite's parts:
//!
//! * [`Harness`] and [`Capabilities`] (here): what a publisher's tests
//!   provide;
//! * `scope`: the names a case publishes under ([`Scope`]);
//! * `received`: what a harness reads back ([`Received`], [`Collector`]);
//! * `events`: the events a case publishes or enqueues ([`event`]);
//! * `deliver`: publishing directly and asserting delivery ([`deliver`])
//!   or an outage ([`expect_outage`]), for a publisher's own cases;
//! * `relay`: the test database and a relay on it ([`relay_config`]);
//! * `verify`: checking what came back, and reporting a passed case;
//! * `cases_direct`, `cases_relay`, `cases_outage`: the cases, by what
//!   they need (the publisher alone, PostgreSQL, a broker that stops);
//! * `cases_faithful`: odd rows written by plain SQL arrive as stored;
//! * `suite`: the macro that runs every case for one harness;
//! * `catalogue`: the list of cases, checked against the cases and the macro.

mod cases_direct;
mod cases_faithful;
mod cases_outage;
mod cases_relay;
mod catalogue;
mod deliver;
mod events;
mod received;
mod relay;
mod scope;
mod suite;
mod verify;

use std::time::Duration;

use async_trait::async_trait;
use outbox::Publisher;

pub use cases_direct::{
    calls_in_flight_at_once_each_settle_their_own_events, delivers_a_batch,
    maps_headers_key_and_destination,
};
pub use cases_faithful::{delivers_every_event_as_stored, HOSTILE_HEADERS, HOSTILE_PAYLOADS};
pub use cases_outage::{outage_burns_no_attempts, survives_a_broker_restart};
pub use cases_relay::{drains_a_large_batch, keeps_aggregate_order, rejects_an_oversized_message};
pub use catalogue::{assert_runs_every_case, CASES};
pub use deliver::{deliver, deliver_after_thaw, expect_outage};
pub use events::event;
pub use received::{distinct_events, Collector, Received, EVENT_ID_HEADER};
pub use relay::relay_config;
pub use scope::Scope;

/// What a harness's broker supports.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Capabilities {
    /// Messages carry a key (Kafka); it must equal the aggregate id.
    pub keyed: bool,
    /// A payload of this many bytes must be refused (by the broker or by a
    /// limit the publisher enforces locally); `None` if there is no limit.
    pub oversized_payload_bytes: Option<usize>,
    /// [`Harness::stop_broker`] and [`Harness::start_broker`] work.
    pub stop_start: bool,
    /// Messages published before a stop are still there after a start.
    pub keeps_data_across_restart: bool,
}

/// A publisher under test, with its broker.
#[async_trait(?Send)]
pub trait Harness {
    /// The publisher type.
    type Publisher: Publisher;

    /// A name for messages, e.g. `kafka (mock cluster)`.
    fn name(&self) -> String;

    /// What the broker supports.
    fn capabilities(&self) -> Capabilities;

    /// A new publisher for the broker.
    async fn publisher(&self) -> Self::Publisher;

    /// Where an event of `scope` without a topic override is published
    /// (the publisher's template applied), as [`Received::destination`]
    /// will show it.
    fn default_destination(&self, scope: &Scope) -> String;

    /// Makes the broker ready to keep `scope`'s messages for
    /// [`Harness::consume`] (create topics, bind a queue). Called before
    /// anything of the scope is published.
    async fn prepare(&self, _scope: &Scope) {}

    /// Reads back the messages published under `scope` (to its default
    /// destination and to its override), in the broker's order for each
    /// aggregate. Returns once `expected` distinct events arrived, or at
    /// `deadline` with what did.
    async fn consume(&self, scope: &Scope, expected: usize, deadline: Duration) -> Vec<Received>;

    /// Takes the broker down (only if [`Capabilities::stop_start`]).
    async fn stop_broker(&self) {
        panic!("{} cannot stop its broker", self.name());
    }

    /// Brings the broker back (only if [`Capabilities::stop_start`]).
    async fn start_broker(&self) {
        panic!("{} cannot start its broker", self.name());
    }
}
