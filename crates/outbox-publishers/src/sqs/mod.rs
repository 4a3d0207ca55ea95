//! `sqs://QUEUE_NAME` (or `sqs://` + a queue URL) and `sns://TOPIC_ARN`:
//! sends events to Amazon SQS queues and SNS topics, FIFO and standard,
//! with the official AWS SDK; an event is delivered when the service
//! listed its entry of a `SendMessageBatch` / `PublishBatch` call as
//! successful. Behind the `sqs` feature (both services).
//!
//! On FIFO queues and topics (names ending in `.fifo`) the aggregate id is
//! the `MessageGroupId` (per-aggregate order) and the event id the
//! `MessageDeduplicationId` (the relay's at-least-once repeats are dropped
//! by the service within its 5-minute window).

mod batch;
mod classify;
mod client;
mod config;
mod message;
mod publisher;

pub use config::{SnsConfig, SqsConfig, DEFAULT_MAX_MESSAGE_BYTES, MAX_BATCH_ENTRIES};
pub use message::{MAX_ATTRIBUTES, OVERFLOW_ATTRIBUTE};
pub use publisher::{SnsPublisher, SqsPublisher};
