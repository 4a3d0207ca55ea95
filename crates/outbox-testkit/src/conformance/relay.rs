//! The relay side of the cases that go through PostgreSQL: the test
//! database, a relay on it, and what the relay left there.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use outbox::{OutageKind, RelayObserver, StatsSnapshot};
use outbox::{Relay, RelayConfig, RelayHandle};
use sqlx::PgPool;
use uuid::Uuid;

use super::scope::Scope;
use super::Harness;
use crate::wait::wait_until;

/// The relay settings the suite uses: quick polls and backoffs, so
/// failures show within seconds.
pub fn relay_config(batch_size: usize) -> RelayConfig {
    RelayConfig {
        batch_size,
        backoff_base_ms: 50,
        backoff_max_ms: 1_000,
        poll_min_ms: 2,
        poll_max_ms: 50,
        outage_backoff_max_ms: 500,
        listen: false,
        ..RelayConfig::default()
    }
}

async fn migrate(pool: &PgPool) {
    let mut conn = pool
        .acquire()
        .await
        .expect("connecting to the test database");
    outbox::migrate(
        &mut conn,
        &outbox::Schema::default(),
        &outbox::MigrateOptions::default(),
    )
    .await
    .expect("migrating the test database");
}

/// Migrates `pool` and prepares a fresh [`Scope`] for `case` on the
/// harness's broker.
pub(super) async fn migrated_scope<H: Harness>(h: &H, pool: &PgPool, case: &str) -> Scope {
    migrate(pool).await;
    let scope = Scope::new(case);
    h.prepare(&scope).await;
    scope
}

/// How often a repeated outage message is printed again (with its count).
const REPEATS_SHOWN_EVERY: u64 = 50;

/// Prints each outage the relay meets when its message differs from the
/// previous one, and every [`REPEATS_SHOWN_EVERY`]th repeat of it, so a case
/// that times out shows what the relay was seeing and whether it still was
/// (the test harness shows this output only for failed tests).
struct OutageLog {
    started: Instant,
    last: Mutex<(String, u64)>,
}

impl RelayObserver for OutageLog {
    fn on_outage(&self, kind: OutageKind, error: &str) {
        let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        let at = self.started.elapsed();
        if last.0 != error {
            eprintln!("relay outage ({kind:?}) at {at:.2?}: {error}");
            *last = (error.to_owned(), 1);
        } else {
            last.1 += 1;
            if last.1 % REPEATS_SHOWN_EVERY == 0 {
                eprintln!(
                    "relay outage ({kind:?}) at {at:.2?}, {} times in a row: {error}",
                    last.1
                );
            }
        }
    }
}

/// What the relay's database says, for a case that timed out: pending
/// events, and each partition's owner and lease.
pub(super) async fn relay_state(pool: &PgPool) -> String {
    let owners: Vec<(i32, Option<String>, Option<String>)> = sqlx::query_as(
        "SELECT partition, owner, (lease_until - now())::text FROM outbox_partitions ORDER BY partition",
    )
    .fetch_all(pool)
    .await
    .unwrap_or_default();
    format!(
        "{} pending; partitions (owner, lease left): {owners:?}",
        pending(pool).await
    )
}

/// A relay on `pool` publishing with a new publisher of the harness,
/// with [`relay_config`].
pub(super) async fn spawn_relay<H: Harness>(
    h: &H,
    pool: &PgPool,
    batch_size: usize,
) -> RelayHandle {
    let log = OutageLog {
        started: Instant::now(),
        last: Mutex::new((String::new(), 0)),
    };
    Relay::builder(pool.clone(), h.publisher().await)
        .config(relay_config(batch_size))
        .observer(Arc::new(log))
        .spawn()
        .await
        .unwrap_or_else(|e| panic!("{}: starting the relay: {e}", h.name()))
}

async fn pending(pool: &PgPool) -> i64 {
    sqlx::query_scalar(
        "SELECT count(*) FROM outbox_events WHERE processed_at IS NULL AND dead_lettered_at IS NULL",
    )
    .fetch_one(pool)
    .await
    .expect("counting pending events")
}

/// Waits (up to `deadline`) until no event is pending.
pub(super) async fn wait_drained(pool: &PgPool, what: &str, deadline: Duration) {
    wait_until(what, deadline, || {
        let pool = pool.clone();
        async move { pending(&pool).await == 0 }
    })
    .await;
}

/// Dead letters as `(id, attempts, last_error)`.
pub(super) async fn dead_letters(pool: &PgPool) -> Vec<(Uuid, i32, Option<String>)> {
    sqlx::query_as("SELECT id, attempts, last_error FROM outbox_dead_letters")
        .fetch_all(pool)
        .await
        .expect("reading outbox_dead_letters")
}

/// Waits (up to `deadline`) until the relay has settled every event, then
/// stops it. Returns its totals as they were when the outbox was drained.
pub(super) async fn drain_and_stop(
    relay: RelayHandle,
    pool: &PgPool,
    what: &str,
    deadline: Duration,
) -> StatsSnapshot {
    wait_drained(pool, what, deadline).await;
    let stats = relay.stats();
    relay.shutdown().await.expect("relay shutdown");
    stats
}
