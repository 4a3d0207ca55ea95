//! Waking the relay after a commit without slowing the producer.
//!
//! A `NOTIFY` inside the business transaction takes PostgreSQL's global
//! notify lock at commit and serialises every producer. Instead, after its
//! commit a producer calls [`crate::Outbox::wake`]: that signals a relay in
//! the same process at once, and (when a pool was given) asks a background
//! task to send one `NOTIFY` on its own connection, coalescing all wake-ups
//! that arrive within `min_interval` into one.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use sqlx::PgPool;
use tokio::sync::Notify;

use crate::queries as q;

/// Shared wake-up signal between producers and relays in one process.
#[derive(Debug, Default)]
pub struct Wakeup {
    local: Notify,
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
        self.local.notify_waiters();
        self.local.notify_one();
    }

    /// Waits for the next [`Wakeup::wake`] in this process.
    pub async fn wait(&self) {
        self.local.notified().await
    }
}
