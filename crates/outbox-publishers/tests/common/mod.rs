//! What the publishers' conformance test files share: the parts of a
//! conformance [`Harness`](outbox_testkit::conformance::Harness) that are
//! the same for every publisher, and the checks that several brokers'
//! own cases make alike.
//!
//! Each test file is a crate of its own and uses part of this module.
#![allow(dead_code, unused_macros)]

use std::time::{Duration, Instant};

use outbox::{Event, Outcome, Publisher, Unavailable};
use outbox_testkit::brokers::server::Launch;
use outbox_testkit::brokers::Broker;
use outbox_testkit::conformance::{self, Capabilities};

/// Writes `impl Harness for $harness` from what tells one harness from
/// another: the publisher type, the name and the capabilities, followed by
/// the remaining methods as they are (`publisher`, `default_destination`,
/// `consume`, and where the harness has them `prepare`, `stop_broker` and
/// `start_broker`).
macro_rules! harness {
    (
        $harness:ty => $publisher:ty, $name:literal, $capabilities:expr;
        $($methods:tt)*
    ) => {
        #[::async_trait::async_trait(?Send)]
        impl ::outbox_testkit::conformance::Harness for $harness {
            type Publisher = $publisher;

            fn name(&self) -> String {
                $name.into()
            }

            fn capabilities(&self) -> ::outbox_testkit::conformance::Capabilities {
                $capabilities
            }

            $($methods)*
        }
    };
}

/// A harness on a broker the test kit launches (RabbitMQ, NATS, Redis),
/// with its suite: writes the harness struct holding the
/// [`Broker`](outbox_testkit::brokers::Broker) in `$field`, its `shared()`
/// (the one broker of the test binary, for the cases that leave it
/// running) and `private()` (a broker of the calling test's own, for the
/// cases that stop, freeze or reconfigure it) constructors, its
/// [`harness!`] impl (the publisher built from the harness's `config()`,
/// the broker stopped and restarted through the test kit), and the
/// conformance suite's tests on it.
///
/// `after_restart`, if named, runs after every restart (a consumer's
/// declarations made again, as a consumer does when it reconnects).
///
/// Both constructors give `None` when the broker is skipped
/// (`OUTBOX_SKIP_BROKER_TESTS`), and so does every test then.
macro_rules! broker_harness {
    (
        $(#[$meta:meta])*
        struct $harness:ident { $field:ident: $server:ty }
        publishes $publisher:ident as $name:literal, $capabilities:expr;
        $(after_restart: $after_restart:path;)?
        faithful_up_to: $limit:expr;
        $($methods:tt)*
    ) => {
        $(#[$meta])*
        struct $harness {
            $field: ::outbox_testkit::brokers::Broker<$server>,
        }

        impl $harness {
            /// The broker shared by the cases that do not stop it.
            async fn shared() -> Option<$harness> {
                static SHARED: ::outbox_testkit::brokers::SharedCell<$server> =
                    ::outbox_testkit::brokers::SharedCell::new();
                let $field = ::outbox_testkit::brokers::Broker::shared(&SHARED).await?;
                Some($harness { $field })
            }

            /// A broker of its own.
            async fn private() -> Option<$harness> {
                let $field = ::outbox_testkit::brokers::Broker::private().await?;
                Some($harness { $field })
            }
        }

        harness! {
            $harness => $publisher, $name, $capabilities;

            async fn publisher(&self) -> $publisher {
                $publisher::new(self.config())
                    .expect(concat!(stringify!($publisher), " from the harness's config"))
            }

            async fn stop_broker(&self) {
                self.$field.stop().await;
            }

            async fn start_broker(&self) {
                self.$field.restart().await;
                $($after_restart(self).await;)?
            }

            $($methods)*
        }

        // ---- the suite: the shared broker, and one of its own for the outage cases ----

        outbox_testkit::conformance_suite! {
            shared: $harness::shared().await,
            private: $harness::private().await,
            faithful_up_to: $limit,
        }
    };
}

/// The capabilities of an unkeyed broker that stops, starts and keeps
/// its messages across a restart, refusing a payload of
/// `oversized_payload_bytes`.
pub fn restartable(oversized_payload_bytes: usize) -> Capabilities {
    Capabilities {
        keyed: false,
        oversized_payload_bytes: Some(oversized_payload_bytes),
        stop_start: true,
        keeps_data_across_restart: true,
    }
}

/// Publishes `batch` with `p` while `broker` is frozen (`SIGSTOP`, its
/// connections left open), thaws it, and returns what the publish gave
/// and how long it took. Panics with `hung` if the publish was still
/// waiting after 20 s: a frozen broker must be an outage, not a hang.
pub async fn publish_while_frozen<L: Launch + Send + 'static>(
    broker: &Broker<L>,
    p: &impl Publisher,
    batch: &[Event],
    hung: &str,
) -> (Result<Vec<Outcome>, Unavailable>, Duration) {
    broker.lock().freeze();
    let started = Instant::now();
    let frozen = tokio::time::timeout(Duration::from_secs(20), p.publish(batch)).await;
    let took = started.elapsed();
    broker.lock().thaw();
    (frozen.unwrap_or_else(|_| panic!("{hung}")), took)
}

/// Publishes `event` with `p`, whose login the server on `port` refuses:
/// the call is an outage whose message names the port and does not show
/// `password`. Returns the outage.
pub async fn assert_refused_login(
    p: &impl Publisher,
    event: &Event,
    port: u16,
    password: &str,
) -> Unavailable {
    let e = conformance::expect_outage(p, event, "a refused login is an outage").await;
    assert!(e.message.contains(&port.to_string()), "{e}");
    assert!(!e.message.contains(password), "{e}");
    e
}
