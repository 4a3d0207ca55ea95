//! One source's task: its worker while it has work, dormant between
//! ([`supervise`]), and its slot reader when its schema is in the WAL mode
//! (`slot.rs`). What is kept of it while it is served is in `shared.rs`.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::watch;

use super::shared::{SourceCtx, SourceShared};
use super::slot::SlotReader;
use super::SourceState;
use crate::event::Event;
use crate::publisher::{Outcome, Publisher, Unavailable};
use crate::relay::assembly::{Assembly, TableStart};
use crate::relay::backoff::DoublingDelay;
use crate::relay::observe::{BatchReport, OutageKind, RelayObserver};
use crate::relay::ownership::Ownership;
use crate::relay::store::Store;
use crate::relay::worker::Exit;
use crate::schema::Schema;

/// The longest wait before a source whose start failed (tables missing,
/// database down) is tried again.
const RETRY_MAX_MS: u64 = 30_000;

/// Runs the source until `stop`: dormant until woken, then a worker and its
/// lease round until the worker goes dormant again (or fails: then a wait
/// that doubles, with the problem reported).
pub(crate) async fn supervise(src: Arc<SourceShared>, ctx: SourceCtx, stop: watch::Receiver<bool>) {
    let parts = Assembly {
        pool: ctx.pool.clone(),
        schema: src.schema.clone(),
        publisher: Arc::new(Unclosed(ctx.publisher.clone())),
        config: ctx.config.clone(),
        stats: src.stats.clone(),
        observer: Some(Arc::new(Tracking {
            src: src.clone(),
            inner: ctx.observer.clone(),
        })),
        wakeup: src.wakeup.clone(),
        rebalance: src.rebalance.clone(),
        #[cfg(feature = "opentelemetry")]
        tracer: ctx.tracer.clone(),
    };
    let mut source = Source {
        src,
        ctx,
        store: parts.store(),
        parts,
        slot: SlotReader::default(),
        retry: DoublingDelay::new(100, RETRY_MAX_MS),
        partitions: None,
        ownership: None,
    };
    // A WAL-mode schema's producers wake nobody (they write no row): its
    // slot is read from the start, not from the first wake-up.
    source
        .slot
        .ensure(&source.src, &source.ctx, &source.parts, &stop)
        .await;
    source.serve(stop).await;
    source.slot.finish().await;
}

/// One source's task and what it keeps between its workers.
struct Source {
    src: Arc<SourceShared>,
    ctx: SourceCtx,
    parts: Assembly,
    store: Store,
    slot: SlotReader,
    /// The wait before starting again what failed.
    retry: DoublingDelay,
    /// The schema's partition count, read once.
    partitions: Option<i32>,
    /// Kept while dormant: leases still valid are claimed from at once.
    ownership: Option<Arc<Ownership>>,
}

/// Why a source's worker ended, as its task sees it.
enum Ended {
    /// Idle: dormant until `woken` has passed, or the backoff at `retry_at`.
    Dormant {
        woken: u64,
        retry_at: Option<tokio::time::Instant>,
    },
    /// It failed; started again after a wait.
    Failed,
    /// The source is stopping.
    Stopped,
}

impl Source {
    /// [`supervise`]'s loop; a WAL-mode schema's slot reader is started
    /// (and started again after a failure) whenever the source wakes.
    async fn serve(&mut self, mut stop: watch::Receiver<bool>) {
        let mut woken = self.src.wakeup.generation();
        // When the earliest backoff ends, as the last worker left it.
        let mut retry_at: Option<tokio::time::Instant> = None;
        loop {
            if !self.sleep_dormant(woken, retry_at, &mut stop).await {
                return;
            }
            retry_at = None;
            let total = match prepare(
                &self.ctx.pool,
                &self.src.schema,
                &self.store,
                &mut self.partitions,
            )
            .await
            {
                Ok(total) => total,
                Err(e) => {
                    self.src.database_problem(Some(e.with_causes()));
                    if let Some(o) = &self.ctx.observer {
                        o.on_outage(OutageKind::Database, &e.with_causes());
                    }
                    if !self.wait_to_retry(&mut stop).await {
                        return;
                    }
                    continue;
                }
            };
            self.slot
                .ensure(&self.src, &self.ctx, &self.parts, &stop)
                .await;
            self.src.set_state(SourceState::Active);
            match self.run_worker(total, &mut stop).await {
                Ended::Dormant {
                    woken: w,
                    retry_at: at,
                } => {
                    self.retry.reset();
                    woken = w;
                    retry_at = at;
                    tracing::debug!(source = %self.src.name, "dormant");
                }
                Ended::Failed => {
                    woken = self.src.wakeup.generation();
                    if !self.wait_to_retry(&mut stop).await {
                        return;
                    }
                }
                Ended::Stopped => return,
            }
            if *stop.borrow() {
                return;
            }
        }
    }

    /// Dormant: waits for a wake-up (one since `woken` ends this at once),
    /// the end of a backoff (the worker's or the slot reader's) or the
    /// stop. Returns whether to go on.
    async fn sleep_dormant(
        &self,
        woken: u64,
        retry_at: Option<tokio::time::Instant>,
        stop: &mut watch::Receiver<bool>,
    ) -> bool {
        self.src.set_state(SourceState::Dormant);
        let wake_at = match (retry_at, self.slot.retry_at()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let backoff_end = async {
            match wake_at {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = self.src.wakeup.wait_since(woken) => {}
            _ = backoff_end => {}
            _ = stop.changed() => return false,
        }
        !*stop.borrow()
    }

    /// After a failure: a wait that doubles, then a look again whatever
    /// woke the source meanwhile. Returns whether to go on.
    async fn wait_to_retry(&mut self, stop: &mut watch::Receiver<bool>) -> bool {
        tokio::select! {
            _ = tokio::time::sleep(self.retry.next_delay()) => {}
            _ = stop.changed() => return false,
        }
        self.src.wakeup.wake_local();
        true
    }

    /// Runs a worker and its lease round until the worker ends.
    async fn run_worker(&mut self, total: i32, stop: &mut watch::Receiver<bool>) -> Ended {
        let lease = Duration::from_millis(self.ctx.config.lease_ms);
        let ownership = self
            .ownership
            .get_or_insert_with(|| Ownership::new(self.ctx.instance_id.clone(), total, lease))
            .clone();
        // Without a lease still valid, the first lease round runs before
        // the worker starts, so that its first step is a claim; with one,
        // the round runs beside the worker's first claim.
        let valid = !ownership.claimable().partitions.is_empty();
        let first_round_done = !valid
            && match ownership.tick(&self.store).await {
                Ok(()) => {
                    if let Some(o) = &self.parts.observer {
                        o.on_ownership(ownership.held_count(), total as usize);
                    }
                    true
                }
                Err(e) => {
                    tracing::debug!(error = %e.with_causes(), "first lease round failed; the lease loop tries again");
                    false
                }
            };
        let (shutdown_tx, shutdown_rx) = watch::channel(false);
        let mut table = self.parts.start_table(TableStart {
            store: self.store.clone(),
            ownership,
            total: total as usize,
            first_round_done,
            reads_slot: self.slot.is_running(),
            dormant_after: Some(self.ctx.dormant_after),
            shutdown: shutdown_rx,
        });
        let exit = tokio::select! {
            r = &mut table.worker => r,
            _ = stop.changed() => {
                let _ = shutdown_tx.send(true);
                (&mut table.worker).await
            }
        };
        // The lease round ends between rounds, not in one.
        let _ = shutdown_tx.send(true);
        let _ = table.lease.await;
        match exit {
            Ok(Ok(Exit::Dormant { woken, retry_in })) => Ended::Dormant {
                woken,
                retry_at: retry_in.map(|d| tokio::time::Instant::now() + d),
            },
            Ok(Ok(Exit::Stopped)) => Ended::Stopped,
            Ok(Err(e)) => {
                self.src.database_problem(Some(e.with_causes()));
                Ended::Failed
            }
            Err(e) => {
                tracing::error!(source = %self.src.name, error = %e, "source worker panicked; starting it again");
                self.src
                    .database_problem(Some(format!("worker panicked: {e}")));
                Ended::Failed
            }
        }
    }
}

/// Before a worker starts: the schema is checked (once) and its partition
/// count read (once).
async fn prepare(
    pool: &sqlx::PgPool,
    schema: &Schema,
    store: &Store,
    partitions: &mut Option<i32>,
) -> crate::Result<i32> {
    if let Some(n) = *partitions {
        return Ok(n);
    }
    let mut conn = pool
        .acquire()
        .await
        .map_err(crate::Error::db("connecting"))?;
    crate::migrate::ensure_migrated(&mut conn, schema).await?;
    drop(conn);
    let n = store.partition_count().await?;
    *partitions = Some(n);
    Ok(n)
}

/// The source's view of its batches: keeps its health and partitions, and
/// passes everything on to the caller's observer.
struct Tracking {
    src: Arc<SourceShared>,
    inner: Option<Arc<dyn RelayObserver>>,
}

impl RelayObserver for Tracking {
    fn on_batch(&self, report: &BatchReport<'_>) {
        if report.outage.is_none() {
            *self.src.broker_problem.lock().expect("source lock") = None;
            self.src.database_problem(None);
        }
        if let Some(o) = &self.inner {
            o.on_batch(report);
        }
    }

    fn on_outage(&self, kind: OutageKind, error: &str) {
        match kind {
            OutageKind::Broker => {
                *self.src.broker_problem.lock().expect("source lock") =
                    Some(format!("publisher: {error}"))
            }
            _ => self.src.database_problem(Some(error.to_owned())),
        }
        if let Some(o) = &self.inner {
            o.on_outage(kind, error);
        }
    }

    fn on_ownership(&self, held: usize, total: usize) {
        self.src.held.store(held, Ordering::Relaxed);
        self.src.database_problem(None);
        if let Some(o) = &self.inner {
            o.on_ownership(held, total);
        }
    }
}

/// A publisher shared by sources: a worker that stops does not close it
/// (the relay closes it once, at the end).
struct Unclosed(Arc<dyn Publisher>);

#[async_trait]
impl Publisher for Unclosed {
    fn name(&self) -> &str {
        self.0.name()
    }

    async fn publish(&self, batch: &[Event]) -> Result<Vec<Outcome>, Unavailable> {
        self.0.publish(batch).await
    }

    fn destination(&self, event: &Event) -> Option<String> {
        self.0.destination(event)
    }

    fn concurrent_calls(&self) -> usize {
        self.0.concurrent_calls()
    }

    fn events_per_call(&self) -> usize {
        self.0.events_per_call()
    }

    async fn health(&self) -> Result<(), Unavailable> {
        self.0.health().await
    }

    async fn close(&self) {}
}
