//! `kafka://HOST:PORT[,HOST:PORT…]`: publishes to Apache Kafka (or any
//! broker speaking its protocol) with an idempotent, `acks=all` producer.
//! Behind the `kafka` feature.

mod classify;
mod config;
mod message;
mod publisher;

pub use config::{KafkaConfig, DEFAULT_TOPIC_TEMPLATE};
pub use publisher::KafkaPublisher;
