//! What JetStream's answers mean: a PubAck or a publish error as an
//! [`Outcome`], or as a sign that the transport is down.

use async_nats::jetstream::context::{PublishError, PublishErrorKind};
use async_nats::jetstream::publish::PublishAck;
use async_nats::jetstream::ErrorCode;
use outbox::Outcome;

use super::config::NoStream;
use crate::broker::answer::Answer;

/// JetStream API errors that concern the message itself: it will never be
/// stored as it is.
const REJECTED_CODES: &[ErrorCode] = &[
    ErrorCode::STREAM_MESSAGE_EXCEEDS_MAXIMUM,
    ErrorCode::STREAM_HEADER_EXCEEDS_MAXIMUM,
];

/// Sorts the result of awaiting one PubAck. `context` says where (server
/// and subject), for the messages.
pub(super) fn classify(
    result: Result<PublishAck, PublishError>,
    no_stream: NoStream,
    context: &str,
) -> Answer {
    let e = match result {
        Ok(_ack) => return Answer::Outcome(Outcome::Delivered),
        Err(e) => e,
    };
    let text = outbox::redact::redact_text(&format!("nats {context}: {e}"));
    match e.kind() {
        PublishErrorKind::StreamNotFound => {
            let why = format!(
                "{text}: no JetStream stream captures this subject (or JetStream is not enabled): \
                 create a stream for it, e.g. nats stream add --subjects 'outbox.>'"
            );
            Answer::Outcome(match no_stream {
                NoStream::Retry => Outcome::Retry(why),
                NoStream::Reject => Outcome::Rejected(why),
            })
        }
        PublishErrorKind::TimedOut
        | PublishErrorKind::BrokenPipe
        | PublishErrorKind::MaxAckPending => Answer::Transport(text),
        PublishErrorKind::WrongLastMessageId | PublishErrorKind::WrongLastSequence => {
            // The producer's own Nats-Expected-* header failed: the stream
            // only moves on, so the expectation never holds later.
            Answer::Outcome(Outcome::Rejected(text))
        }
        _ => match api_error_code(&e) {
            Some(code) if REJECTED_CODES.contains(&code) => {
                Answer::Outcome(Outcome::Rejected(text))
            }
            Some(_) => Answer::Outcome(Outcome::Retry(text)),
            // Not an answer of the JetStream API: the request never got
            // through (the client's queue is closed).
            None => Answer::Transport(text),
        },
    }
}

/// The JetStream API error code behind `e`, if the server answered with one.
fn api_error_code(e: &PublishError) -> Option<ErrorCode> {
    let source = std::error::Error::source(e)?;
    source
        .downcast_ref::<async_nats::jetstream::Error>()
        .map(async_nats::jetstream::Error::error_code)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api_error(code: u64, description: &str) -> PublishError {
        let e: async_nats::jetstream::Error = serde_json::from_value(serde_json::json!({
            "code": 400, "err_code": code, "description": description
        }))
        .unwrap();
        PublishError::with_source(PublishErrorKind::Other, e)
    }

    #[test]
    fn no_stream_follows_the_setting() {
        let e = || PublishError::new(PublishErrorKind::StreamNotFound);
        let retry = classify(Err(e()), NoStream::Retry, "at nats://h:4222, subject a.b");
        let Answer::Outcome(Outcome::Retry(why)) = retry else {
            panic!("{retry:?}");
        };
        assert!(why.contains("a.b") && why.contains("stream"), "{why}");
        assert!(matches!(
            classify(Err(e()), NoStream::Reject, "x"),
            Answer::Outcome(Outcome::Rejected(_))
        ));
    }

    #[test]
    fn silence_and_broken_links_are_outages() {
        for kind in [
            PublishErrorKind::TimedOut,
            PublishErrorKind::BrokenPipe,
            PublishErrorKind::MaxAckPending,
        ] {
            assert!(matches!(
                classify(Err(PublishError::new(kind)), NoStream::Retry, "x"),
                Answer::Transport(_)
            ));
        }
        assert!(matches!(
            classify(
                Err(PublishError::new(PublishErrorKind::Other)),
                NoStream::Retry,
                "x"
            ),
            Answer::Transport(_)
        ));
    }

    #[test]
    fn api_errors_are_sorted_by_code() {
        let too_big = classify(
            Err(api_error(10054, "message size exceeds maximum allowed")),
            NoStream::Retry,
            "x",
        );
        let Answer::Outcome(Outcome::Rejected(why)) = too_big else {
            panic!("{too_big:?}");
        };
        assert!(why.contains("exceeds maximum"), "{why}");
        assert!(matches!(
            classify(
                Err(api_error(10077, "maximum messages exceeded")),
                NoStream::Retry,
                "x"
            ),
            Answer::Outcome(Outcome::Retry(_))
        ));
        assert!(matches!(
            classify(
                Err(PublishError::new(PublishErrorKind::WrongLastSequence)),
                NoStream::Retry,
                "x"
            ),
            Answer::Outcome(Outcome::Rejected(_))
        ));
    }
}
