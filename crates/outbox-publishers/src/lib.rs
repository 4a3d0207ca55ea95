//! Publishers for the outbox relay. The JSON-lines publishers (stdout, file)
//! have no dependencies; each broker sits behind a cargo feature.
//! [`registry`] names them all: a spec (`kafka://…`, `file:…`) and a
//! `[publisher.NAME]` table checked without connecting, then built.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

#[cfg(any(
    feature = "kafka",
    feature = "amqp",
    feature = "nats",
    feature = "redis",
    feature = "http",
    feature = "sqs"
))]
mod broker;
pub mod cloudevents;
mod error;
pub mod registry;
pub mod stream;
pub mod template;
#[cfg(test)]
mod test_support;

pub use cloudevents::{Envelope, Format};
pub use error::Error;
pub use template::{MissingHeader, Template, TemplateError};

pub use stream::{EnvelopeStdoutPublisher, FilePublisher, StdoutPublisher};

#[cfg(feature = "kafka")]
pub mod kafka;

#[cfg(feature = "amqp")]
pub mod amqp;

#[cfg(feature = "nats")]
pub mod nats;

#[cfg(feature = "redis")]
pub mod redis;

#[cfg(feature = "http")]
pub mod http;

#[cfg(feature = "sqs")]
pub mod sqs;
