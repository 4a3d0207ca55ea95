//! Test kit for the outbox: a throwaway PostgreSQL, a publisher that records
//! and fails on command, and checks of the guarantees.
#![deny(missing_docs)]

pub mod brokers;
#[cfg(feature = "browser")]
pub mod browser;
pub mod cloudevents;
pub mod conformance;
pub mod order;
pub mod postgres;
pub mod promtool;
pub mod publisher;
pub mod wait;
#[cfg(feature = "webhook")]
pub mod webhook;

/// Process groups, watchdogs, logs, program lookup and free ports: what the
/// throwaway PostgreSQL runs on, and what [`brokers`] run on too.
pub use outbox_embedded_pg::process;

pub use order::{assert_delivered_once_in_order, first_delivery_violation};
pub use publisher::{Attempt, Fail, Match, TestPublisher};
pub use wait::wait_until;
