//! Waking the relay after a commit without slowing the producer.
//!
//! A `NOTIFY` inside the business transaction takes PostgreSQL's global
//! notify lock at commit and serialises every producer. Instead, after its
//! commit a producer calls [`crate::Outbox::wake`]: that signals a relay in
//! the same process at once, and (when a pool was given) asks a background
//! task to send one `NOTIFY` on its own connection, coalescing all wake-ups
//! that arrive within `min_interval` into one.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use sqlx::PgPool;
use tokio::sync::Notify;

use crate::queries as q;

/// Shared wake-up signal between producers and relays in one process.
#[derive(Debug, Default)]
pub struct Wakeup {
    local: Notify,
    /// How many wake-ups there have been: a relay that notes it before it
    /// looks for work, and finds it changed when it is about to wait, looks
    /// again instead (the wake-up came while it was not waiting).
    generation: AtomicU64,
    /// How many times the pauses have changed (as the relay's listener
    /// heard): the WAL reader reads them again when this moves.
    pauses: AtomicU64,
    remote: Option<Arc<RemoteWakeup>>,
}

#[derive(Debug)]
struct RemoteWakeup {
    pending: AtomicBool,
    kick: Notify,
}

impl Wakeup {
    /// A wake-up that only signals relays in this process.
    pub fn local() -> Arc<Self> {
        Arc::new(Wakeup::default())
    }

    /// A wake-up that also sends a coalesced `NOTIFY channel` on `pool`, at
    /// most once per `min_interval`, so relays in other processes wake too.
    /// Must be called inside a tokio runtime.
    pub fn with_notify(pool: PgPool, channel: String, min_interval: Duration) -> Arc<Self> {
        let remote = Arc::new(RemoteWakeup {
            pending: AtomicBool::new(false),
            kick: Notify::new(),
        });
        let task = remote.clone();
        tokio::spawn(async move {
            // Ends once every handle is gone (only this task holds it).
            while Arc::strong_count(&task) > 1 {
                let kicked = task.kick.notified();
                if !task.pending.swap(false, Ordering::AcqRel) {
                    let _ = tokio::time::timeout(Duration::from_secs(1), kicked).await;
                    continue;
                }
                if let Err(e) = sqlx::query(q::WAKEUP_NOTIFY)
                    .bind(&channel)
                    .execute(&pool)
                    .await
                {
                    tracing::debug!(error = %e, "wake-up notify failed; the relay's polling covers it");
                }
                tokio::time::sleep(min_interval).await;
            }
        });
        Arc::new(Wakeup {
            local: Notify::new(),
            generation: AtomicU64::new(0),
            pauses: AtomicU64::new(0),
            remote: Some(remote),
        })
    }

    /// Signals that new events were committed. Never blocks.
    pub fn wake(&self) {
        self.wake_local();
        if let Some(remote) = &self.remote {
            if !remote.pending.swap(true, Ordering::AcqRel) {
                remote.kick.notify_one();
            }
        }
    }

    /// Signals relays in this process only (used by the relay's own
    /// listener, which must not echo a NOTIFY back).
    pub fn wake_local(&self) {
        self.generation.fetch_add(1, Ordering::AcqRel);
        self.local.notify_waiters();
    }

    /// Signals that a pause was added or lifted (the relay's listener
    /// heard the pauses' trigger).
    pub fn pauses_changed(&self) {
        self.pauses.fetch_add(1, Ordering::AcqRel);
    }

    /// How many pause changes there have been.
    pub fn pauses_generation(&self) -> u64 {
        self.pauses.load(Ordering::Acquire)
    }

    /// The wake-ups so far: note it before looking for work, and pass it to
    /// [`Wakeup::wait_since`].
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// Waits for a wake-up after the one numbered `seen` (from
    /// [`Wakeup::generation`]): at once if there has been one since.
    /// Unlike a stored permit, a wake-up that ended a wait is not seen
    /// again by the next one, so one commit costs one look for work.
    pub async fn wait_since(&self, seen: u64) {
        let notified = self.local.notified();
        tokio::pin!(notified);
        // Registered before the check: a wake-up between the two is not
        // lost.
        notified.as_mut().enable();
        if self.generation() != seen {
            return;
        }
        notified.await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_wake_up_while_nobody_waits_ends_the_next_wait_at_once() {
        let w = Wakeup::local();
        let seen = w.generation();
        w.wake();
        tokio::time::timeout(Duration::from_secs(5), w.wait_since(seen))
            .await
            .expect("the wake-up before the wait was lost");
    }

    #[tokio::test]
    async fn a_wake_up_that_ended_a_wait_is_not_seen_by_the_next() {
        let w = Wakeup::local();
        let seen = w.generation();
        let waiter = tokio::spawn({
            let w = w.clone();
            async move { w.wait_since(seen).await }
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        w.wake();
        tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .expect("a waiting relay was not woken")
            .unwrap();
        let seen = w.generation();
        let again = tokio::time::timeout(Duration::from_millis(50), w.wait_since(seen)).await;
        assert!(again.is_err(), "one wake-up ended two waits");
    }
}
