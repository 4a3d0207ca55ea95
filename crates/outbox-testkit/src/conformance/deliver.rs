//! Publishing directly (no relay) and asserting delivery: what a
//! publisher's own cases do between the steps they are about.

use std::time::{Duration, Instant};

use outbox::{Event, Outcome, Publisher, Unavailable};

/// Publishes `event` alone and asserts it was delivered.
///
/// # Panics
///
/// If the publisher reports an outage or any outcome but
/// [`Outcome::Delivered`].
pub async fn deliver<P: Publisher + ?Sized>(publisher: &P, event: &Event) {
    assert_eq!(
        publisher
            .publish(std::slice::from_ref(event))
            .await
            .unwrap_or_else(|e| panic!("publishing event {}: {e}", event.id)),
        vec![Outcome::Delivered],
        "publishing event {}",
        event.id
    );
}

/// Publishes `event` alone and returns the outage the publisher must
/// report for it (a broker-wide problem, not the event's).
///
/// # Panics
///
/// With `expected` (what the outage is about) if the publisher reports
/// per-event outcomes instead.
pub async fn expect_outage<P: Publisher + ?Sized>(
    publisher: &P,
    event: &Event,
    expected: &str,
) -> Unavailable {
    publisher
        .publish(std::slice::from_ref(event))
        .await
        .expect_err(expected)
}

/// Publishes `batch` again and again (every 100 ms) until every event of
/// it is delivered: a frozen broker coming back after its thaw.
///
/// # Panics
///
/// If that has not happened 30 s after the first try, with the last
/// result.
pub async fn deliver_after_thaw<P: Publisher + ?Sized>(publisher: &P, batch: &[Event]) {
    let started = Instant::now();
    loop {
        match publisher.publish(batch).await {
            Ok(outcomes)
                if outcomes.len() == batch.len()
                    && outcomes.iter().all(|o| *o == Outcome::Delivered) =>
            {
                return
            }
            other => assert!(
                started.elapsed() < Duration::from_secs(30),
                "no delivery 30 s after the thaw: {other:?}"
            ),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
