//! `amqp://USER:PASS@HOST:PORT/VHOST`: publishes to RabbitMQ (AMQP 0-9-1)
//! with publisher confirms and persistent messages. Behind the `amqp`
//! feature.

mod classify;
mod config;
mod connection;
mod message;
mod publisher;

pub use config::{
    redact_url, AmqpConfig, ExchangeType, Unroutable, DEFAULT_EXCHANGE, DEFAULT_MAX_MESSAGE_BYTES,
    DEFAULT_ROUTING_KEY_TEMPLATE,
};
pub use publisher::AmqpPublisher;
