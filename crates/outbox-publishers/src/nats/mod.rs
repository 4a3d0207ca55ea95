//! `nats://HOST:PORT[,HOST:PORT…]`: publishes to NATS JetStream; an event
//! is delivered when the stream acknowledges it (PubAck). Behind the `nats`
//! feature.

mod classify;
mod config;
mod message;
mod publisher;

pub use config::{NatsConfig, NoStream, DEFAULT_PORT, DEFAULT_SUBJECT};
pub use publisher::NatsPublisher;
