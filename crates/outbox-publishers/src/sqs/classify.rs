//! What the services' answers mean: an error on one entry of a batch call
//! as an [`Outcome`], and a failed call as what it means for all of its
//! entries.

use std::error::Error as StdError;

use aws_sdk_sqs::config::http::HttpResponse;
use aws_sdk_sqs::error::{ProvideErrorMetadata, SdkError};
use outbox::Outcome;

use crate::broker::publisher::push_causes;

/// What a whole batch call came to, when it did not answer per entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum CallFailure {
    /// The transport is down, or the service refuses every call until an
    /// operator acts (credentials, permissions, a missing queue or topic,
    /// a disabled KMS key): an outage, no attempt counted.
    Outage(String),
    /// May pass (throttled, service error, timeout of one call): each
    /// entry is retried.
    Retry(String),
    /// The call was refused for its input: some entry is invalid. A call
    /// of one entry rejects it; a larger one is sent again entry by entry
    /// to find which.
    Invalid(String),
}

impl CallFailure {
    /// What the failure says, in a sentence.
    pub(super) fn into_text(self) -> String {
        match self {
            CallFailure::Outage(why) | CallFailure::Retry(why) | CallFailure::Invalid(why) => why,
        }
    }

    /// What the failure means for an event it concerns alone (its
    /// destination cannot be used, or a call of its one entry failed):
    /// invalid input rejects it.
    pub(super) fn outcome(self) -> Outcome {
        match self {
            CallFailure::Outage(why) => Outcome::Unavailable(why),
            CallFailure::Retry(why) => Outcome::Retry(why),
            CallFailure::Invalid(why) => Outcome::Rejected(why),
        }
    }

    /// What the failure of a call of `entries` entries means for each of
    /// them: a call of several refused for its input does not say which
    /// entry is invalid, so each is retried (and sent again alone).
    pub(super) fn outcome_of_each(self, entries: usize) -> Outcome {
        match self {
            CallFailure::Invalid(why) if entries > 1 => Outcome::Retry(why),
            other => other.outcome(),
        }
    }
}

/// Error codes that reject a message for good.
const REJECTED: &[&str] = &[
    "InvalidMessageContents",
    "MessageTooLong",
    "InvalidParameterValue",
    "InvalidParameterValueException",
    "InvalidParameter",
    "InvalidParameterException",
    "InvalidAttributeName",
    "InvalidAttributeValue",
    "ValidationError",
    "ValidationException",
    "AWS.SimpleQueueService.InvalidMessageContents",
];

/// Error codes that no retry of one message fixes, for every message alike.
const OUTAGE: &[&str] = &[
    "AccessDenied",
    "AccessDeniedException",
    "AuthorizationError",
    "AuthorizationErrorException",
    "InvalidClientTokenId",
    "SignatureDoesNotMatch",
    "UnrecognizedClientException",
    "IncompleteSignature",
    "MissingAuthenticationToken",
    "ExpiredToken",
    "ExpiredTokenException",
    "InvalidSecurity",
    "RequestExpired",
    "QueueDoesNotExist",
    "AWS.SimpleQueueService.NonExistentQueue",
    "NotFound",
    "NotFoundException",
    "KmsAccessDenied",
    "KmsDisabled",
    "KmsInvalidKeyUsage",
    "KmsInvalidState",
    "KmsNotFound",
    "KmsOptInRequired",
    "KMSAccessDenied",
    "KMSAccessDeniedException",
    "KMSDisabled",
    "KMSDisabledException",
    "KMSInvalidState",
    "KMSInvalidStateException",
    "KMSNotFound",
    "KMSNotFoundException",
    "KMSOptInRequired",
    "EndpointDisabled",
    "InvalidAddress",
    "InvalidSecurityException",
];

/// Error codes of a call refused as a whole for its size or shape.
const BATCH_SHAPE: &[&str] = &[
    "BatchRequestTooLong",
    "AWS.SimpleQueueService.BatchRequestTooLong",
    "TooManyEntriesInBatchRequest",
    "AWS.SimpleQueueService.TooManyEntriesInBatchRequest",
    "BatchEntryIdsNotDistinct",
    "AWS.SimpleQueueService.BatchEntryIdsNotDistinct",
    "InvalidBatchEntryId",
    "AWS.SimpleQueueService.InvalidBatchEntryId",
];

/// A hint for errors that come from missing or refused credentials.
pub(super) fn with_hint(text: String) -> String {
    let lower = text.to_ascii_lowercase();
    if lower.contains("credential") && !lower.contains("aws_access_key_id") {
        format!(
            "{text} (credentials come from AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, AWS_PROFILE, web identity or an instance role)"
        )
    } else {
        text
    }
}

/// `text` on one line, secrets hidden.
pub(super) fn scrub(text: &str) -> String {
    outbox::redact::redact_text(&text.replace(['\n', '\r'], " "))
}

/// An error and its causes, `: `-separated, each said once (the SDK's
/// own context printer adds the debug form, which says it all again).
fn chain(error: &(dyn StdError + 'static)) -> String {
    let mut out = error.to_string();
    push_causes(&mut out, error);
    out
}

/// Sorts an error answered for one entry of a batch call, by its code.
///
/// * invalid contents, too large, invalid parameter or attribute:
///   `Rejected`;
/// * refused access, a missing queue or topic, a KMS key that cannot be
///   used: `Unavailable` (an operator's fix, for every event alike; counting
///   attempts would dead-letter healthy events);
/// * throttling, service errors and anything else: `Retry`.
pub(super) fn classify_entry(code: &str, message: Option<&str>, context: &str) -> Outcome {
    let text = scrub(&format!(
        "{context}: {code}{}",
        message.map(|m| format!(": {m}")).unwrap_or_default()
    ));
    if REJECTED.contains(&code) {
        Outcome::Rejected(text)
    } else if OUTAGE.contains(&code) {
        Outcome::Unavailable(text)
    } else {
        Outcome::Retry(text)
    }
}

/// Sorts a failed call: an answer from the service by its code (and a 401
/// or 403 as refused access), everything else (no connection, timeout,
/// no credentials, an answer that cannot be read) as an outage.
pub(super) fn classify_call<E>(error: &SdkError<E, HttpResponse>, context: &str) -> CallFailure
where
    E: ProvideErrorMetadata + StdError + Send + Sync + 'static,
{
    match error {
        SdkError::ServiceError(service) => {
            let e = service.err();
            let code = e.code().unwrap_or("unknown");
            let text = scrub(&format!(
                "{context}: {code}{}",
                e.message().map(|m| format!(": {m}")).unwrap_or_default()
            ));
            let refused = matches!(service.raw().status().as_u16(), 401 | 403);
            if OUTAGE.contains(&code) || refused {
                CallFailure::Outage(text)
            } else if REJECTED.contains(&code) || BATCH_SHAPE.contains(&code) {
                CallFailure::Invalid(text)
            } else {
                CallFailure::Retry(text)
            }
        }
        SdkError::TimeoutError(_) => {
            CallFailure::Outage(scrub(&format!("{context}: no answer within timeout_ms")))
        }
        other => CallFailure::Outage(scrub(&format!("{context}: {}", chain(other)))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entry_errors_by_code() {
        for code in [
            "InvalidMessageContents",
            "MessageTooLong",
            "InvalidParameterValue",
        ] {
            assert!(
                matches!(classify_entry(code, Some("bad"), "q"), Outcome::Rejected(_)),
                "{code}"
            );
        }
        for code in ["KmsAccessDenied", "AccessDenied", "KMSDisabled"] {
            assert!(
                matches!(classify_entry(code, None, "q"), Outcome::Unavailable(_)),
                "{code}"
            );
        }
        for code in [
            "RequestThrottled",
            "ThrottlingException",
            "KmsThrottled",
            "InternalError",
            "ServiceUnavailable",
            "Whatever",
        ] {
            assert!(
                matches!(classify_entry(code, None, "q"), Outcome::Retry(_)),
                "{code}"
            );
        }
        let Outcome::Rejected(why) = classify_entry(
            "InvalidMessageContents",
            Some("Invalid binary character\nin body"),
            "sqs queue orders",
        ) else {
            panic!()
        };
        assert_eq!(
            why,
            "sqs queue orders: InvalidMessageContents: Invalid binary character in body"
        );
    }

    #[test]
    fn an_invalid_call_rejects_an_entry_only_when_it_was_alone() {
        let invalid = || CallFailure::Invalid("bad".into());
        assert_eq!(
            invalid().outcome_of_each(1),
            Outcome::Rejected("bad".into())
        );
        assert_eq!(invalid().outcome_of_each(3), Outcome::Retry("bad".into()));
        assert_eq!(invalid().outcome(), Outcome::Rejected("bad".into()));
        let outage = CallFailure::Outage("down".into());
        assert_eq!(
            outage.outcome_of_each(3),
            Outcome::Unavailable("down".into())
        );
        let retry = CallFailure::Retry("slow".into());
        assert_eq!(
            retry.clone().outcome_of_each(1),
            Outcome::Retry("slow".into())
        );
        assert_eq!(retry.into_text(), "slow");
    }

    #[test]
    fn credential_errors_say_where_credentials_come_from() {
        assert!(with_hint("no credentials".into()).contains("AWS_PROFILE"));
        assert_eq!(with_hint("throttled".into()), "throttled");
        let named = "credentials: AWS_ACCESS_KEY_ID is not set".to_owned();
        assert_eq!(with_hint(named.clone()), named);
    }
}
