//! Test kit for the outbox: a throwaway PostgreSQL, a publisher that records
//! and fails on command, and checks of the guarantees.

pub mod brokers;
pub mod conformance;
pub mod order;
pub mod postgres;
pub mod publisher;
pub mod wait;

pub use order::{assert_delivered_once_in_order, first_delivery_violation};
pub use publisher::{Attempt, Fail, Match, TestPublisher};
pub use wait::wait_until;
