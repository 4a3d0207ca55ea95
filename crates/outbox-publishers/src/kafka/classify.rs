//! What librdkafka's answers mean: an error code as a [`Class`], a failed
//! message as its class and a sentence, and a batch's results as its
//! outcomes (or an outage).

use outbox::{Outcome, Unavailable};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};

/// What the publisher does with one failed message, by error kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Class {
    /// The broker can never take it: dead-letter at once.
    Permanent,
    /// May pass for this message: retry after a backoff.
    Transient,
    /// The brokers are unreachable: an outage, no attempt counted if the
    /// whole batch failed this way.
    Transport,
}

/// Sorts a librdkafka error code into a [`Class`].
pub(super) fn classify(code: RDKafkaErrorCode) -> Class {
    use RDKafkaErrorCode as C;
    match code {
        // The message or its destination is unacceptable, now and later.
        C::MessageSizeTooLarge
        | C::InvalidMessageSize
        | C::MessageBatchTooLarge
        | C::InvalidMessage
        | C::InvalidTopic
        | C::InvalidRecord
        | C::InvalidTimestamp
        | C::PolicyViolation
        | C::UnsupportedForMessageFormat
        | C::BadMessage
        | C::InvalidArgument => Class::Permanent,
        // Nothing reached a broker, or the cluster refuses every request
        // (credentials, ACLs): no single event is to blame.
        C::MessageTimedOut
        | C::AllBrokersDown
        | C::BrokerTransportFailure
        | C::BrokerNotAvailable
        | C::NetworkException
        | C::RequestTimedOut
        | C::OperationTimedOut
        | C::TimedOutQueue
        | C::Resolve
        | C::SSL
        | C::Authentication
        | C::SaslAuthenticationFailed
        | C::ClusterAuthorizationFailed
        | C::TopicAuthorizationFailed
        | C::BrokerDestroy
        | C::DestroyBroker
        | C::PurgeQueue
        | C::PurgeInflight
        | C::Fatal
        | C::QueueFull => Class::Transport,
        // Leader elections, unknown topics (auto-creation or an operator may
        // fix them), replicas catching up, and anything unexpected.
        _ => Class::Transient,
    }
}

/// What one message came to: delivered, or its class and why.
pub(super) type Sent = Result<(), (Class, String)>;

/// A failed message to `topic`: its class (by librdkafka's error code)
/// and why, in a sentence.
pub(super) fn failure(e: &KafkaError, topic: &str) -> (Class, String) {
    let code = e.rdkafka_error_code().unwrap_or(RDKafkaErrorCode::Fail);
    let why = match code {
        RDKafkaErrorCode::MessageSizeTooLarge => format!(
            "kafka refused the message to topic {topic}: larger than message.max.bytes ({e})"
        ),
        _ => format!("kafka, topic {topic}: {e}"),
    };
    (classify(code), why)
}

/// A batch's outcomes from what each message came to. With nothing
/// delivered and the transport failed (a message of class
/// [`Class::Transport`], or `fatal`, the producer's fatal error), the
/// whole batch is an outage: rejections in it are found again on the next
/// try. Otherwise a transport failure of one message is
/// [`Outcome::Unavailable`] (no attempt counted against it), a permanent
/// one a rejection and a transient one a retry.
pub(super) fn settle(
    results: Vec<Sent>,
    fatal: Option<String>,
) -> Result<Vec<Outcome>, Unavailable> {
    if !results.iter().any(Result::is_ok) {
        let transport = results.iter().find_map(|r| match r {
            Err((Class::Transport, m)) => Some(m.clone()),
            _ => None,
        });
        if let Some(message) = fatal.or(transport) {
            return Err(Unavailable::new(message));
        }
    }
    Ok(results
        .into_iter()
        .map(|r| match r {
            Ok(()) => Outcome::Delivered,
            Err((Class::Permanent, m)) => Outcome::Rejected(m),
            Err((Class::Transport, m)) => Outcome::Unavailable(m),
            Err((Class::Transient, m)) => Outcome::Retry(m),
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_are_classified() {
        assert_eq!(
            classify(RDKafkaErrorCode::MessageSizeTooLarge),
            Class::Permanent
        );
        assert_eq!(classify(RDKafkaErrorCode::InvalidTopic), Class::Permanent);
        assert_eq!(
            classify(RDKafkaErrorCode::MessageTimedOut),
            Class::Transport
        );
        assert_eq!(classify(RDKafkaErrorCode::AllBrokersDown), Class::Transport);
        assert_eq!(
            classify(RDKafkaErrorCode::NotLeaderForPartition),
            Class::Transient
        );
        assert_eq!(
            classify(RDKafkaErrorCode::UnknownTopicOrPartition),
            Class::Transient
        );
    }

    #[test]
    fn a_batch_with_nothing_delivered_and_a_failed_transport_is_an_outage() {
        let down = || Err((Class::Transport, "all brokers down".to_owned()));
        let bad = || Err((Class::Permanent, "too large".to_owned()));
        let e = settle(vec![down(), bad()], None).unwrap_err();
        assert_eq!(e.message, "all brokers down");
        let e = settle(vec![bad()], Some("fatal".into())).unwrap_err();
        assert_eq!(e.message, "fatal");
    }

    #[test]
    fn a_batch_that_got_through_keeps_each_message_s_outcome() {
        let results = vec![
            Ok(()),
            Err((Class::Transport, "t".to_owned())),
            Err((Class::Permanent, "p".to_owned())),
            Err((Class::Transient, "r".to_owned())),
        ];
        assert_eq!(
            settle(results, Some("fatal".into())).unwrap(),
            [
                Outcome::Delivered,
                Outcome::Unavailable("t".into()),
                Outcome::Rejected("p".into()),
                Outcome::Retry("r".into()),
            ]
        );
        let rejected = settle(vec![Err((Class::Permanent, "p".to_owned()))], None).unwrap();
        assert_eq!(rejected, [Outcome::Rejected("p".into())]);
    }

    #[test]
    fn a_message_too_large_says_which_setting_refused_it() {
        let e = KafkaError::MessageProduction(RDKafkaErrorCode::MessageSizeTooLarge);
        let (class, why) = failure(&e, "orders");
        assert_eq!(class, Class::Permanent);
        assert!(
            why.contains("topic orders") && why.contains("message.max.bytes"),
            "{why}"
        );
    }
}
