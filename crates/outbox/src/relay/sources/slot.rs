//! A source whose schema is in the WAL mode: besides the table worker
//! (which wakes for what the reader sets aside, and sleeps dormant
//! otherwise), its slot is read all the time the source is served, by the
//! same reader a relay of one source runs ([`crate::relay::wal`]). A
//! reader that stops with an error is reported as the source's problem and
//! started again after a wait that doubles; one that ends because the
//! schema went back to the table mode is not started again.

use std::sync::Arc;

use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::shared::{SourceCtx, SourceShared};
use crate::relay::assembly::Assembly;
use crate::relay::backoff::DoublingDelay;
use crate::relay::observe::OutageKind;
use crate::relay::wal::SlotState;

/// The longest wait before a failed reader is started again.
const RETRY_MAX_MS: u64 = 30_000;

/// The slot reader of one source, while it has one.
#[derive(Default)]
pub(crate) struct SlotReader {
    running: Option<(JoinHandle<crate::Result<()>>, Arc<SlotState>)>,
    retry: Option<DoublingDelay>,
    /// When a failed reader may be started again.
    not_before: Option<tokio::time::Instant>,
}

impl SlotReader {
    /// Starts the reader if the schema has a slot and none runs (called
    /// whenever the source wakes, after its schema is checked).
    pub(crate) async fn ensure(
        &mut self,
        src: &Arc<SourceShared>,
        ctx: &SourceCtx,
        parts: &Assembly,
        stop: &watch::Receiver<bool>,
    ) {
        if let Some((task, _)) = &self.running {
            if !task.is_finished() {
                return;
            }
        }
        if let Some((task, state)) = self.running.take() {
            let retry = self
                .retry
                .get_or_insert_with(|| DoublingDelay::new(1_000, RETRY_MAX_MS));
            match task.await {
                Ok(Ok(())) if state.finished_cleanly() => retry.reset(),
                Ok(Ok(())) => return,
                Ok(Err(e)) => {
                    let problem = format!("replication: {}", e.with_causes());
                    src.database_problem(Some(problem.clone()));
                    if let Some(o) = &parts.observer {
                        o.on_outage(OutageKind::Database, &problem);
                    }
                    self.not_before = Some(tokio::time::Instant::now() + retry.next_delay());
                }
                Err(e) => {
                    src.database_problem(Some(format!("slot reader panicked: {e}")));
                    self.not_before = Some(tokio::time::Instant::now() + retry.next_delay());
                }
            }
        }
        if self
            .not_before
            .is_some_and(|at| tokio::time::Instant::now() < at)
        {
            return;
        }
        let recorded = match ctx.pool.acquire().await {
            Ok(mut conn) => crate::wal::recorded_slot_if_any(&mut conn, &src.schema).await,
            Err(e) => Err(crate::Error::db("reading the schema's replication slot")(e)),
        };
        let recorded = match recorded {
            Ok(r) => r,
            Err(e) => {
                src.database_problem(Some(e.with_causes()));
                return;
            }
        };
        let Some((slot, publication)) = recorded else {
            return;
        };
        let Some(target) = ctx.replication.clone() else {
            src.database_problem(Some(format!(
                "schema {} is read through replication slot {slot} (outbox migrate --mode wal), and this source has no address for a replication connection: give its entry the PostgreSQL server's own URL (not a pooler's)",
                src.schema.name()
            )));
            return;
        };
        tracing::info!(source = %src.name, slot, "reading the schema's replication slot");
        let (task, state) = parts.start_reader(target, stop.clone(), slot, publication, None);
        // When it ends, the source wakes to look at why.
        let wakeup = src.wakeup.clone();
        let watched = tokio::spawn(async move {
            let ended = task.await.unwrap_or_else(|e| {
                Err(crate::Error::invalid(
                    "replication",
                    format!("the slot reader panicked: {e}"),
                ))
            });
            wakeup.wake_local();
            ended
        });
        self.running = Some((watched, state));
    }

    /// Whether a reader runs (the schema is read through its slot).
    pub(crate) fn is_running(&self) -> bool {
        self.running
            .as_ref()
            .is_some_and(|(task, _)| !task.is_finished())
    }

    /// When a failed reader may be started again, if one waits.
    pub(crate) fn retry_at(&self) -> Option<tokio::time::Instant> {
        match &self.running {
            Some(_) => None,
            None => self.not_before,
        }
    }

    /// Waits for the reader to end (it watches the source's stop itself).
    pub(crate) async fn finish(self) {
        if let Some((task, _)) = self.running {
            match task.await {
                Ok(Err(e)) => {
                    tracing::warn!(error = %e.with_causes(), "the slot reader had stopped with an error")
                }
                Err(e) => tracing::warn!(error = %e, "the slot reader panicked"),
                Ok(Ok(())) => {}
            }
        }
    }
}
