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
#[macro_export]
macro_rules! conformance_suite {
    (
        shared: $shared:expr,
        private: $private:expr,
        faithful_up_to: $limit:expr $(,)?
    ) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn delivers_a_batch() {
            let Some(h) = $shared else { return };
            $crate::conformance::delivers_a_batch(&h).await;
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn maps_headers_key_and_destination() {
            let Some(h) = $shared else { return };
            $crate::conformance::maps_headers_key_and_destination(&h).await;
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn keeps_aggregate_order() {
            let Some(h) = $shared else { return };
            let pool = $crate::postgres::test_db().await.pool().await;
            $crate::conformance::keeps_aggregate_order(&h, &pool).await;
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn drains_a_large_batch() {
            let Some(h) = $shared else { return };
            let pool = $crate::postgres::test_db().await.pool().await;
            $crate::conformance::drains_a_large_batch(&h, &pool, 5_000).await;
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn rejects_an_oversized_message() {
            let Some(h) = $shared else { return };
            let pool = $crate::postgres::test_db().await.pool().await;
            $crate::conformance::rejects_an_oversized_message(&h, &pool).await;
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn delivers_every_event_as_stored() {
            let Some(h) = $shared else { return };
            let pool = $crate::postgres::test_db().await.pool().await;
            $crate::conformance::delivers_every_event_as_stored(&h, &pool, $limit).await;
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
}
