//! `redis://[USER:PASS@]HOST:PORT[/DB]`: appends events to Redis streams
//! (`XADD`); an event is delivered when Redis answered with its entry id.
//! Behind the `redis` feature.

mod classify;
mod config;
mod message;
mod publisher;

pub use config::{RedisConfig, DEFAULT_MAX_MESSAGE_BYTES, DEFAULT_STREAM};
pub use publisher::RedisPublisher;
