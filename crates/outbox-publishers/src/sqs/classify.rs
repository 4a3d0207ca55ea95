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
}
