//! One source's task: its worker while it has work, dormant between
//! ([`supervise`]), and its slot reader when its schema is in the WAL mode
//! (`slot.rs`). What is kept of it while it is served is in `shared.rs`.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::watch;
use tracing::Instrument;

use super::shared::{SourceCtx, SourceShared};
use super::slot::SlotReader;
use super::SourceState;
use crate::event::Event;
use crate::publisher::{Outcome, Publisher, Unavailable};
use crate::relay::backoff::DoublingDelay;
use crate::relay::lease::{lease_loop, LeaseLoop};
use crate::relay::observe::{BatchReport, OutageKind, RelayObserver};
use crate::relay::ownership::Ownership;
use crate::relay::store::Store;
use crate::relay::worker::{self, Exit, Worker};
use crate::relay::Retention;
use crate::schema::Schema;

/// The longest wait before a source whose start failed (tables missing,
/// database down) is tried again.
const RETRY_MAX_MS: u64 = 30_000;

/// Runs the source until `stop`: dormant until woken, then a worker and its
/// lease round until the worker goes dormant again (or fails: then a wait
/// that doubles, with the problem reported).
pub(crate) async fn supervise(src: Arc<SourceShared>, ctx: SourceCtx, stop: watch::Receiver<bool>) {
    let mut slot = SlotReader::default();
    // A WAL-mode schema's producers wake nobody (they write no row): its
    // slot is read from the start, not from the first wake-up.
    let observer: Arc<dyn RelayObserver> = Arc::new(Tracking {
        src: src.clone(),
        inner: ctx.observer.clone(),
    });
    slot.ensure(&src, &ctx, &observer, &stop).await;
    serve(&src, &ctx, stop, &mut slot).await;
    slot.finish().await;
}

/// [`supervise`]'s loop; a WAL-mode schema's slot reader is started (and
/// started again after a failure) whenever the source wakes.
async fn serve(
    src: &Arc<SourceShared>,
    ctx: &SourceCtx,
    mut stop: watch::Receiver<bool>,
    slot: &mut SlotReader,
) {
    let keep = ctx.config.retention == Retention::Keep;
    let store = Store::new(ctx.pool.clone(), &src.schema, keep);
    let publisher: Arc<dyn Publisher> = Arc::new(Unclosed(ctx.publisher.clone()));
    let observer: Arc<dyn RelayObserver> = Arc::new(Tracking {
        src: src.clone(),
        inner: ctx.observer.clone(),
    });
    let mut retry = DoublingDelay::new(100, RETRY_MAX_MS);
    let mut partitions: Option<i32> = None;
    let mut woken = src.wakeup.generation();
    // When the earliest backoff ends, as the last worker left it.
    let mut retry_at: Option<tokio::time::Instant> = None;
    let mut ownership: Option<Arc<Ownership>> = None;
    loop {
        // Dormant: wait for a wake-up (one since `woken` ends this at once)
        // or the end of a backoff.
        src.set_state(SourceState::Dormant);
        let wake_at = match (retry_at, slot.retry_at()) {
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
            _ = src.wakeup.wait_since(woken) => {}
            _ = backoff_end => {}
            _ = stop.changed() => return,
        }
        retry_at = None;
        if *stop.borrow() {
            return;
        }
        let total = match prepare(&ctx.pool, &src.schema, &store, &mut partitions).await {
            Ok(total) => total,
            Err(e) => {
                src.database_problem(Some(e.with_causes()));
                if let Some(o) = &ctx.observer {
                    o.on_outage(OutageKind::Database, &e.with_causes());
                }
                let delay = retry.next_delay();
                tokio::select! {
                    _ = tokio::time::sleep(delay) => {}
                    _ = stop.changed() => return,
                }
                // Look again after the wait, whatever woke it meanwhile.
                src.wakeup.wake_local();
                continue;
            }
        };
        slot.ensure(src, ctx, &observer, &stop).await;
        src.set_state(SourceState::Active);
        let lease = Duration::from_millis(ctx.config.lease_ms);
        // Kept while dormant: leases still valid are claimed from at once.
        let ownership = match &ownership {
            Some(o) => o.clone(),
            None => {
                let o = Ownership::new(ctx.instance_id.clone(), total, lease);
                ownership = Some(o.clone());
                o
            }
        };
        // Without a lease still valid, the first lease round runs before
        // the worker starts, so that its first step is a claim; with one,
        // the round runs beside the worker's first claim.
        let valid = !ownership.claimable().partitions.is_empty();
        let first_round_done = !valid
            && match ownership.tick(&store).await {
                Ok(()) => {
                    observer.on_ownership(ownership.held_count(), total as usize);
                    true
                }
                Err(e) => {
                    tracing::debug!(error = %e.with_causes(), "first lease round failed; the lease loop tries again");
                    false
                }
            };
        let (shutdown_tx, shutdown_rx) = watch::channel(false);
        let channel = src.schema.channel();
        let lease_task = tokio::spawn(
            lease_loop(
                LeaseLoop {
                    store: store.clone(),
                    ownership: ownership.clone(),
                    wakeup: src.wakeup.clone(),
                    observer: Some(observer.clone()),
                    total: total as usize,
                    channel: channel.clone(),
                    rebalance: src.rebalance.clone(),
                    first_round_done,
                },
                shutdown_rx.clone(),
            )
            .instrument(tracing::Span::current()),
        );
        let worker = Worker::new(worker::Deps {
            store: Arc::new(store.clone()),
            ownership,
            publisher: publisher.clone(),
            config: ctx.config.clone(),
            wakeup: src.wakeup.clone(),
            shutdown: shutdown_rx,
            stats: src.stats.clone(),
            observer: Some(observer.clone()),
            channel,
            #[cfg(feature = "opentelemetry")]
            tracer: ctx.tracer.clone(),
            dormant_after: Some(ctx.dormant_after),
        });
        let mut running = tokio::spawn(worker.run().instrument(tracing::Span::current()));
        let exit = tokio::select! {
            r = &mut running => r,
            _ = stop.changed() => {
                let _ = shutdown_tx.send(true);
                (&mut running).await
            }
        };
        // The lease round ends between rounds, not in one.
        let _ = shutdown_tx.send(true);
        let _ = lease_task.await;
        match exit {
            Ok(Ok(Exit::Dormant { woken: w, retry_in })) => {
                retry.reset();
                woken = w;
                retry_at = retry_in.map(|d| tokio::time::Instant::now() + d);
                tracing::debug!(source = %src.name, "dormant");
            }
            Ok(Ok(Exit::Stopped)) => return,
            Ok(Err(e)) => {
                src.database_problem(Some(e.with_causes()));
                woken = src.wakeup.generation();
                let delay = retry.next_delay();
                tokio::select! {
                    _ = tokio::time::sleep(delay) => {}
                    _ = stop.changed() => return,
                }
                src.wakeup.wake_local();
            }
            Err(e) => {
                tracing::error!(source = %src.name, error = %e, "source worker panicked; starting it again");
                src.database_problem(Some(format!("worker panicked: {e}")));
                woken = src.wakeup.generation();
                tokio::select! {
                    _ = tokio::time::sleep(retry.next_delay()) => {}
                    _ = stop.changed() => return,
                }
                src.wakeup.wake_local();
            }
        }
        if *stop.borrow() {
            return;
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

    async fn health(&self) -> Result<(), Unavailable> {
        self.0.health().await
    }

    async fn close(&self) {}
}
