//! Checking what came back from the broker against what was enqueued, and
//! reporting a passed case.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use sqlx::PgPool;
use uuid::Uuid;

use super::received::{Received, EVENT_ID_HEADER};
use outbox::{RelayHandle, StatsSnapshot};

use super::relay::{dead_letters, drain_and_stop};
use super::scope::Scope;
use super::Harness;
use crate::order::assert_delivered_once_in_order;

/// One expected event: its id, aggregate, position in the aggregate and
/// payload.
#[derive(Debug, Clone)]
pub(super) struct Expected {
    pub(super) aggregate: String,
    pub(super) n: i64,
    pub(super) payload: serde_json::Value,
}

/// Checks what came back: every expected event, nothing else of the scope,
/// payloads intact, first deliveries in order per aggregate.
pub(super) fn verify(
    harness: &str,
    case: &str,
    expected: &HashMap<Uuid, Expected>,
    received: &[Received],
) {
    let mut deliveries = Vec::with_capacity(received.len());
    for (i, r) in received.iter().enumerate() {
        let id = r.event_id().unwrap_or_else(|| {
            panic!(
                "{harness} / {case}: message {i} has no valid {EVENT_ID_HEADER} header: {:?}",
                r.headers
            )
        });
        let Some(e) = expected.get(&id) else {
            panic!("{harness} / {case}: message {i} is event {id}, which was not expected here (dead-lettered events must not reach the broker)");
        };
        let body: serde_json::Value = serde_json::from_slice(&r.payload).unwrap_or_else(|err| {
            panic!("{harness} / {case}: event {id}: payload is not JSON ({err})")
        });
        assert_eq!(
            body, e.payload,
            "{harness} / {case}: event {id}: payload changed in transit"
        );
        deliveries.push((id, e.aggregate.as_str(), e.n));
    }
    assert_delivered_once_in_order(
        &format!(
            "{harness} / {case} (read back {} messages): ",
            received.len()
        ),
        expected.keys(),
        &deliveries,
    );
}

/// Reads back `scope`'s messages (waiting up to `deadline` for every
/// expected event) and [`verify`]s them.
pub(super) async fn read_back<H: Harness>(
    h: &H,
    run: &Run,
    scope: &Scope,
    expected: &HashMap<Uuid, Expected>,
    deadline: Duration,
) -> Vec<Received> {
    let received = h.consume(scope, expected.len(), deadline).await;
    verify(&run.name, run.case, expected, &received);
    received
}

/// The end of a relayed case where every event must arrive: nothing
/// dead-lettered, and everything expected read back ([`read_back`]).
pub(super) async fn check_delivered<H: Harness>(
    h: &H,
    pool: &PgPool,
    run: &Run,
    scope: &Scope,
    expected: &HashMap<Uuid, Expected>,
    deadline: Duration,
) {
    assert!(
        dead_letters(pool).await.is_empty(),
        "{} / {}: nothing dead-lettered",
        run.name,
        run.case
    );
    read_back(h, run, scope, expected, deadline).await;
}

/// A case being run: the harness's name and the case's (for messages),
/// and when it started (for the report).
pub(super) struct Run {
    pub(super) name: String,
    pub(super) case: &'static str,
    started: Instant,
}

impl Run {
    /// Starts the clock of `case` on `h`.
    pub(super) fn start<H: Harness>(h: &H, case: &'static str) -> Run {
        Run {
            name: h.name(),
            case,
            started: Instant::now(),
        }
    }

    /// Waits up to `deadline` until `relay` has settled every event on
    /// `pool` ([`drain_and_stop`]; a timeout names the harness and `what`
    /// was awaited), then stops it and returns its totals.
    pub(super) async fn drain_and_stop(
        &self,
        relay: RelayHandle,
        pool: &PgPool,
        what: &str,
        deadline: Duration,
    ) -> StatsSnapshot {
        drain_and_stop(relay, pool, &format!("{}: {what}", self.name), deadline).await
    }

    /// Asserts that nothing on `pool` was dead-lettered; `why` says what a
    /// dead letter would mean, and the message lists them.
    pub(super) async fn assert_no_dead_letters(&self, pool: &PgPool, why: &str) {
        let dead = dead_letters(pool).await;
        assert!(
            dead.is_empty(),
            "{} / {}: {why}: {dead:?}",
            self.name,
            self.case
        );
    }

    /// Reports the case passed, with how long it took and `detail`.
    pub(super) fn done(&self, detail: &str) {
        done(&self.name, self.case, self.started, detail);
    }
}

/// Reports a passed case, with how long it took and `detail`.
pub(super) fn done(harness: &str, case: &str, started: Instant, detail: &str) {
    eprintln!(
        "conformance {harness}: {case} passed in {:.2?}{}{detail}",
        started.elapsed(),
        if detail.is_empty() { "" } else { "; " }
    );
}
