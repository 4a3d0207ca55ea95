//! [`conformance_suite!`](crate::conformance_suite): the suite's tests for
//! one publisher, written once. A publisher's test file implements
//! [`Harness`](super::Harness) and invokes the macro; the cases a publisher
//! cannot run (no size limit, no broker to stop) return early by its
//! [`Capabilities`](super::Capabilities), saying so.

/// Generates one `#[tokio::test]` per conformance case (the two outage
/// cases share one test, on a broker of their own), so a publisher's test
/// file cannot leave a case out. A test in the catalogue checks that this
/// macro calls every case of [`CASES`](crate::conformance::CASES).
///
/// * `shared`: an expression, awaited inside each test, giving
///   `Option<H>`: the harness for the cases that leave the broker running
///   (`None` skips the test, as the broker launchers do under
///   `OUTBOX_SKIP_BROKER_TESTS`);
/// * `private`: the same, for the cases that stop and start the broker;
/// * `faithful_up_to`: the largest payload the publisher must deliver as
///   stored (`Option<usize>`, see
///   [`delivers_every_event_as_stored`](crate::conformance::delivers_every_event_as_stored)).
///
/// ```ignore
/// outbox_testkit::conformance_suite! {
///     shared: RedisHarness::shared().await,
///     private: RedisHarness::private().await,
///     faithful_up_to: Some(MAX_MESSAGE_BYTES - 1_000),
/// }
/// ```
///
/// Invoke it inside a `mod` to run the suite for two harnesses of one
/// file (the tests are then `file::delivers_a_batch` and so on).
///
/// A file that runs the cases with settings of its own (another batch
/// size, a case left out for a reason it states) writes its tests with
/// the macro's two test-writing forms, one line a test: `@direct` for the
/// cases that need the harness alone, `@relayed` for those that also take
/// a fresh test database. Each test may carry attributes (`#[ignore]`).
///
/// ```ignore
/// outbox_testkit::conformance_suite! { @relayed SqsHarness::shared(Mode::SqsFifo).await;
///     sqs_fifo_keeps_aggregate_order(h, pool) => conformance::keeps_aggregate_order(&h, &pool),
/// }
/// ```
#[macro_export]
macro_rules! conformance_suite {
    (
        shared: $shared:expr,
        private: $private:expr,
        faithful_up_to: $limit:expr $(,)?
    ) => {
        $crate::conformance_suite! { @direct $shared;
            delivers_a_batch(h) => $crate::conformance::delivers_a_batch(&h),
            maps_headers_key_and_destination(h) => $crate::conformance::maps_headers_key_and_destination(&h),
            calls_in_flight_at_once_each_settle_their_own_events(h) => $crate::conformance::calls_in_flight_at_once_each_settle_their_own_events(&h),
        }

        $crate::conformance_suite! { @relayed $shared;
            keeps_aggregate_order(h, pool) => $crate::conformance::keeps_aggregate_order(&h, &pool),
            drains_a_large_batch(h, pool) => $crate::conformance::drains_a_large_batch(&h, &pool, 5_000),
            rejects_an_oversized_message(h, pool) => $crate::conformance::rejects_an_oversized_message(&h, &pool),
            delivers_every_event_as_stored(h, pool) => $crate::conformance::delivers_every_event_as_stored(&h, &pool, $limit),
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn outage_and_restart() {
            let Some(h) = $private else { return };
            let pool = $crate::postgres::test_db().await.pool().await;
            $crate::conformance::outage_burns_no_attempts(&h, &pool).await;
            let pool = $crate::postgres::test_db().await.pool().await;
            $crate::conformance::survives_a_broker_restart(&h, &pool).await;
        }
    };

    // One test per case that needs only the harness `$h` (from `$harness`,
    // the test returning early on `None`).
    (@direct $harness:expr; $($(#[$attr:meta])* $test:ident($h:ident) => $case:expr,)*) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            $(#[$attr])*
            async fn $test() {
                let Some($h) = $harness else { return };
                $case.await;
            }
        )*
    };

    // One test per case that goes through PostgreSQL: as `@direct`, with
    // `$pool` on a fresh test database.
    (@relayed $harness:expr; $($(#[$attr:meta])* $test:ident($h:ident, $pool:ident) => $case:expr,)*) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            $(#[$attr])*
            async fn $test() {
                let Some($h) = $harness else { return };
                let $pool = $crate::postgres::test_db().await.pool().await;
                $case.await;
            }
        )*
    };
}
