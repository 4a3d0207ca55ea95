//! The plumbing every broker publisher has around its own protocol: the
//! methods each offers besides [`outbox::Publisher`], connecting within a
//! timeout, settling a call's outcomes, and an error's causes on one line.

#[cfg(any(feature = "amqp", feature = "nats", feature = "redis"))]
use outbox::{Outcome, Unavailable};

/// Publish calls the relay may have in flight at once to a broker whose
/// client pipelines calls on one connection, in order, without waiting
/// for one call's acknowledgements before sending the next (Kafka's
/// producer queue, a multiplexed Redis connection). Ordering does not rest on this: the relay never puts two
/// events of one aggregate in flight, so a batch that joins while a call
/// waits goes out at once in a call of its own.
#[cfg(any(feature = "kafka", feature = "redis"))]
pub(crate) const PIPELINED_CALLS: usize = 4;

/// The methods a broker publisher `$publisher` with settings `$config`
/// offers besides [`outbox::Publisher`], each documented by the comments
/// written above its name:
///
/// * `Debug`, showing only the settings (which redact their own secrets);
/// * `with_envelope`, setting the `envelope` field;
/// * `from_url` (when named), a publisher for `$config::from_url`'s URL
///   with default settings;
/// * `config`, the settings in use.
///
/// The publisher has the fields `config: $config` and `envelope:
/// Envelope`, and a `new($config) -> Result<Self, Error>`.
// Unused when the SQS and SNS publishers are built alone.
#[allow(unused_macros)]
macro_rules! broker_publisher {
    (
        $publisher:ident($config:ident) {
            $(#[$envelope_doc:meta])*
            fn with_envelope;
            $(
                $(#[$url_doc:meta])*
                fn from_url;
            )?
        }
    ) => {
        impl std::fmt::Debug for $publisher {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.debug_struct(stringify!($publisher))
                    .field("config", &self.config)
                    .finish_non_exhaustive()
            }
        }

        impl $publisher {
            $(#[$envelope_doc])*
            pub fn with_envelope(mut self, envelope: $crate::Envelope) -> Self {
                self.envelope = envelope;
                self
            }

            $(
                $(#[$url_doc])*
                pub fn from_url(url: &str) -> Result<Self, $crate::Error> {
                    Self::new($config::from_url(url)?)
                }
            )?

            /// The settings in use.
            pub fn config(&self) -> &$config {
                &self.config
            }
        }
    };
}
#[allow(unused_imports)]
pub(crate) use broker_publisher;

/// `connecting` to `broker` at `at` (its address as messages show it),
/// given up after `wait`: the connection, or why there is none. The
/// client's error goes through `scrub`, since it may quote a secret.
#[cfg(any(feature = "amqp", feature = "nats", feature = "redis"))]
pub(crate) async fn connect_within<T, E: std::fmt::Display>(
    broker: &str,
    at: &str,
    wait: std::time::Duration,
    connecting: impl std::future::Future<Output = Result<T, E>>,
    scrub: impl FnOnce(String) -> String,
) -> Result<T, String> {
    match tokio::time::timeout(wait, connecting).await {
        Err(_) => Err(format!(
            "connecting to {broker} at {at} timed out after {} ms",
            wait.as_millis()
        )),
        Ok(Err(e)) => Err(scrub(format!("cannot connect to {broker} at {at}: {e}"))),
        Ok(Ok(connection)) => Ok(connection),
    }
}

/// A call's outcomes once every answer that will come is in: an event
/// without one is retried, `missing` saying why.
#[cfg(any(feature = "amqp", feature = "nats", feature = "redis"))]
pub(crate) fn or_retry(outcomes: Vec<Option<Outcome>>, missing: &str) -> Vec<Outcome> {
    outcomes
        .into_iter()
        .map(|o| o.unwrap_or_else(|| Outcome::Retry(missing.to_owned())))
        .collect()
}

/// A call's outcomes after the transport failed (`why`): delivered events
/// stay delivered and the ones without an outcome are
/// [`Outcome::Unavailable`], no attempt counted against them; with none
/// delivered, the whole call is an outage.
#[cfg(any(feature = "amqp", feature = "nats", feature = "redis"))]
pub(crate) fn partial_outage(
    outcomes: Vec<Option<Outcome>>,
    why: String,
) -> Result<Vec<Outcome>, Unavailable> {
    if !outcomes.iter().any(|o| o == &Some(Outcome::Delivered)) {
        return Err(Unavailable::new(why));
    }
    Ok(outcomes
        .into_iter()
        .map(|o| o.unwrap_or_else(|| Outcome::Unavailable(why.clone())))
        .collect())
}

/// Appends to `out` the causes of `error` (not `error` itself), each after
/// `: ` and only if `out` does not say it already: clients often repeat a
/// cause in their own message.
#[cfg(any(feature = "http", feature = "sqs"))]
pub(crate) fn push_causes(out: &mut String, error: &(dyn std::error::Error + 'static)) {
    let causes = std::iter::successors(error.source(), |cause| cause.source());
    for text in causes.map(|cause| cause.to_string()) {
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
    }
}

#[cfg(all(test, feature = "amqp", feature = "http"))]
mod tests {
    use std::fmt;
    use std::time::Duration;

    use super::*;

    #[test]
    fn an_outage_keeps_what_was_delivered() {
        let why = "link lost".to_owned();
        let outcomes = vec![Some(Outcome::Delivered), None];
        assert_eq!(
            partial_outage(outcomes, why.clone()).unwrap(),
            [Outcome::Delivered, Outcome::Unavailable(why.clone())]
        );
        let outcomes = vec![Some(Outcome::Rejected("no".into())), None];
        assert!(partial_outage(outcomes, why).is_err());
        assert_eq!(
            or_retry(vec![None], "no answer"),
            [Outcome::Retry("no answer".into())]
        );
    }

    #[test]
    fn causes_are_said_once() {
        #[derive(Debug)]
        struct E(&'static str, Option<Box<E>>);
        impl fmt::Display for E {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.0)
            }
        }
        impl std::error::Error for E {
            fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
                self.1.as_deref().map(|e| e as _)
            }
        }
        let e = E(
            "top: refused",
            Some(Box::new(E("refused", Some(Box::new(E("io", None)))))),
        );
        let mut out = e.to_string();
        push_causes(&mut out, &e);
        assert_eq!(out, "top: refused: io");
    }

    #[tokio::test]
    async fn connecting_is_given_up_after_the_wait() {
        let slow = std::future::pending::<Result<(), String>>();
        let e = connect_within("nats", "nats://h:1", Duration::from_millis(10), slow, |s| s)
            .await
            .unwrap_err();
        assert_eq!(e, "connecting to nats at nats://h:1 timed out after 10 ms");
        let refused = async { Err::<(), _>("refused") };
        let e = connect_within("redis", "redis://h", Duration::from_secs(1), refused, |s| {
            s.to_uppercase()
        })
        .await
        .unwrap_err();
        assert_eq!(e, "CANNOT CONNECT TO REDIS AT REDIS://H: REFUSED");
    }
}
