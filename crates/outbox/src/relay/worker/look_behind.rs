//! The look behind the claim cursor (`relay/cursor.rs`): one statement
//! every `RESCAN_EVERY`, on its own task beside the claims, whose find
//! moves the cursor back. No claim waits for it.

use crate::relay::cursor::Probe;

use super::Worker;

impl Worker {
    /// Runs `probe` on its own task (and its own pooled connection).
    pub(super) fn probe_spawn(&mut self, probe: Probe) {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let store = self.deps.store.clone();
        let (partitions, below) = (probe.partitions.clone(), probe.below);
        tokio::spawn(async move {
            let found = store.event_fresh_lowest_below(&partitions, below).await;
            let _ = tx.send(found);
        });
        self.probe = Some((probe, rx));
    }

    /// Takes in the answer of the running look, if it has arrived.
    pub(super) fn probe_collect(&mut self) {
        let Some((probe, rx)) = self.probe.as_mut() else {
            return;
        };
        let answer = match rx.try_recv() {
            Err(tokio::sync::oneshot::error::TryRecvError::Empty) => return,
            Err(tokio::sync::oneshot::error::TryRecvError::Closed) => {
                Err("the task ended without an answer".to_owned())
            }
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
