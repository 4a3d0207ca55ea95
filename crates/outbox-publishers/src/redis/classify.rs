//! What Redis's answers mean: an error on one `XADD` as an [`Outcome`],
//! or as a sign that the transport is down.

use outbox::Outcome;
use redis::{ErrorKind, RedisError, ServerError};

use crate::broker::answer::Answer;

/// Sorts an error reply to one command of the pipeline, by its code.
///
/// * `WRONGTYPE` (the key holds something other than a stream): the event
///   can never be added there, `Rejected`;
/// * `NOAUTH`, `WRONGPASS`, `NOPERM`: an operator's fix, for every event
///   alike, so an outage (counting attempts would dead-letter healthy
///   events); `ERR Protocol error` too (the server closes the connection);
/// * `OOM`, `READONLY`, `LOADING`, `BUSY`, `MASTERDOWN`, `MISCONF`,
///   `TRYAGAIN`, `CLUSTERDOWN`, `NOREPLICAS` and anything else: may pass,
///   `Retry`.
pub(super) fn classify_reply(error: &ServerError, context: &str) -> Answer {
    let text = reply_text(error, context);
    match error.code() {
        "WRONGTYPE" => Answer::Outcome(Outcome::Rejected(format!(
            "{text} (the key holds another type than a stream: rename it or change the stream template)"
        ))),
        "NOAUTH" | "WRONGPASS" | "NOPERM" => Answer::Transport(text),
        // The server closes the connection after a protocol error.
        "ERR" if error.details().is_some_and(|d| d.starts_with("Protocol error")) => {
            Answer::Transport(text)
        }
        _ => Answer::Outcome(Outcome::Retry(text)),
    }
}

/// The reply as text, on one line, secrets hidden.
fn reply_text(error: &ServerError, context: &str) -> String {
    let detail = error.details().unwrap_or_default();
    outbox::redact::redact_text(&format!("redis {context}: {} {detail}", error.code()))
}

/// Whether a whole request failed on the transport (the connection is to
/// be given up) rather than with an answer from the server.
pub(super) fn is_transport(e: &RedisError) -> bool {
    e.is_io_error()
        || e.is_timeout()
        || e.is_connection_dropped()
        || e.is_connection_refusal()
        || matches!(
            e.kind(),
            ErrorKind::AuthenticationFailed | ErrorKind::Parse | ErrorKind::Client
        )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reply(code: &str, detail: &str) -> ServerError {
        // A reply as the parser makes it, from the wire form.
        let wire = format!("-{code} {detail}\r\n");
        match redis::parse_redis_value(wire.as_bytes()).unwrap() {
            redis::Value::ServerError(e) => e,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn wrong_type_is_a_rejection_that_says_what_to_do() {
        let a = classify_reply(
            &reply(
                "WRONGTYPE",
                "Operation against a key holding the wrong kind of value",
            ),
            "at redis://h:6379, stream \"outbox:order\"",
        );
        let Answer::Outcome(Outcome::Rejected(why)) = a else {
            panic!("{a:?}");
        };
        assert!(
            why.contains("outbox:order") && why.contains("stream template"),
            "{why}"
        );
    }

    #[test]
    fn pressure_and_failover_are_retried() {
        for (code, detail) in [
            ("OOM", "command not allowed when used memory > 'maxmemory'."),
            ("READONLY", "You can't write against a read only replica."),
            ("LOADING", "Redis is loading the dataset in memory"),
            ("MISCONF", "Redis is configured to save RDB snapshots"),
            ("BUSY", "Redis is busy running a script."),
            ("ERR", "something else"),
        ] {
            assert!(
                matches!(
                    classify_reply(&reply(code, detail), "x"),
                    Answer::Outcome(Outcome::Retry(_))
                ),
                "{code}"
            );
        }
    }

    #[test]
    fn refused_access_is_an_outage() {
        for code in ["NOAUTH", "WRONGPASS", "NOPERM"] {
            assert!(matches!(
                classify_reply(&reply(code, "no"), "x"),
                Answer::Transport(_)
            ));
        }
        assert!(matches!(
            classify_reply(
                &reply("ERR", "Protocol error: unauthenticated multibulk length"),
                "x"
            ),
            Answer::Transport(_)
        ));
    }
}
