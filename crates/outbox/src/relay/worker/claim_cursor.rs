//! The worker's claim cursor (`relay/cursor.rs`) with its look behind
//! itself: one statement every `RESCAN_EVERY`, on its own task beside the
//! claims, whose find moves the cursor back. No claim waits for it.

use std::sync::Arc;
use std::time::Instant;

use tokio::sync::oneshot::{self, error::TryRecvError};

use crate::error::Result;
use crate::relay::cursor::{ClaimMeta, Cursor, Probe, Start};
use crate::relay::store::Store;

/// Where the worker's claims start reading fresh rows, and the look behind
/// that point still running, if any.
#[derive(Debug)]
pub(super) struct ClaimCursor {
    cursor: Cursor,
    /// A look behind the cursor still running beside the claims, and where
    /// its answer arrives.
    probe: Option<(Probe, oneshot::Receiver<Result<Option<i64>>>)>,
}

impl ClaimCursor {
    pub fn new() -> Self {
        ClaimCursor {
            cursor: Cursor::new(),
            probe: None,
        }
    }

    /// Where a claim of `partitions` starts reading fresh rows now. Takes in
    /// the answer of a finished look behind the cursor first (so this claim
    /// reads from what it found), then starts the next look on `store` when
    /// one is due for the partitions this claim reads; neither waits for
    /// the database.
    pub fn start(&mut self, store: &Arc<Store>, partitions: &[i32]) -> Start {
        let now = Instant::now();
        self.probe_collect();
        let start = self.cursor.start_claim(partitions, now);
        if self.probe.is_none() {
            if let Some(probe) = self.cursor.probe_due(now) {
                self.probe_spawn(store, probe);
            }
        }
        start
    }

    /// Learns from a claim of `partitions` that started at `start` and saw
    /// `meta` (`None`: it returned no row).
    pub fn observe(&mut self, partitions: &[i32], start: Start, meta: Option<ClaimMeta>) {
        if let Some(meta) = meta {
            self.cursor.observe(partitions, start.from, meta);
        }
    }

    /// Runs `probe` on its own task (and its own pooled connection).
    fn probe_spawn(&mut self, store: &Arc<Store>, probe: Probe) {
        let (tx, rx) = oneshot::channel();
        let store = store.clone();
        let (partitions, below) = (probe.partitions.clone(), probe.below);
        tokio::spawn(async move {
            let found = store.event_fresh_lowest_below(&partitions, below).await;
            let _ = tx.send(found);
        });
        self.probe = Some((probe, rx));
    }

    /// Takes in the answer of the running look, if it has arrived.
    fn probe_collect(&mut self) {
        let Some((probe, rx)) = self.probe.as_mut() else {
            return;
        };
        let answer = match rx.try_recv() {
            Err(TryRecvError::Empty) => return,
            Err(TryRecvError::Closed) => Err("the task ended without an answer".to_owned()),
            Ok(found) => found.map_err(|e| e.with_causes()),
        };
        match answer {
            Ok(Some(lowest)) => {
                tracing::debug!(
                    lowest,
                    cursor = probe.below,
                    "pending events behind the claim cursor: reading from there"
                );
                self.cursor.rewind(probe, lowest);
            }
            Ok(None) => {}
            Err(error) => {
                tracing::debug!(%error, "could not look behind the claim cursor; the next look is one period away")
            }
        }
        self.probe = None;
    }
}
