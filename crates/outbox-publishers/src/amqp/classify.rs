//! What the broker's answers mean: a publisher confirm as an [`Outcome`],
//! a publish error as an outage or a closed channel.

use lapin::protocol::{AMQPErrorKind, AMQPSoftError};
use lapin::Confirmation;
use outbox::Outcome;

use super::config::{AmqpConfig, Unroutable};

/// A failure while publishing, before classification.
pub(super) enum Failure {
    /// The connection is gone (or never came): an outage.
    Transport(String),
    /// The broker closed the channel; the connection is fine.
    Channel(String),
}

/// A publisher confirm for a message sent with `routing_key` under
/// `config`, as an [`Outcome`].
pub(super) fn confirmed(
    config: &AmqpConfig,
    confirmation: Confirmation,
    routing_key: &str,
) -> Outcome {
    match confirmation {
            Confirmation::Ack(None) => Outcome::Delivered,
            Confirmation::Ack(Some(returned)) | Confirmation::Nack(Some(returned)) => {
                let why = format!(
                    "rabbitmq returned the message as unroutable: no queue is bound to exchange {:?} for routing key {routing_key:?} ({} {})",
                    config.exchange, returned.reply_code, returned.reply_text
                );
                match config.unroutable {
                    Unroutable::Reject => Outcome::Rejected(why),
                    Unroutable::Retry | Unroutable::Drop => Outcome::Retry(why),
                }
            }
            Confirmation::Nack(None) => Outcome::Retry(format!(
                "rabbitmq refused the message (basic.nack) on exchange {:?}, routing key {routing_key:?}",
                config.exchange
            )),
            Confirmation::NotRequested => {
                Outcome::Retry("rabbitmq channel is not in confirm mode".to_owned())
            }
        }
}

/// Sorts a publish failure: only a channel closed for the message's sake
/// (`PRECONDITION_FAILED`, e.g. above the broker's `max_message_size`), or
/// closed without a reason while the connection lives, is worth finding
/// the culprit for. A missing exchange (404), refused access (403) and the
/// like concern every message: they are outages, and the next connection
/// declares the exchange again.
pub(super) fn classify(e: &lapin::Error, connected: bool, text: String) -> Failure {
    if !connected || e.is_io_error() || e.is_amqp_hard_error() {
        return Failure::Transport(text);
    }
    match e.kind() {
        lapin::ErrorKind::ProtocolError(amqp) => match amqp.kind() {
            AMQPErrorKind::Soft(AMQPSoftError::PRECONDITIONFAILED) => Failure::Channel(text),
            _ => Failure::Transport(text),
        },
        lapin::ErrorKind::InvalidChannelState(..) | lapin::ErrorKind::InvalidChannel(_) => {
            Failure::Channel(text)
        }
        _ => Failure::Transport(text),
    }
}
