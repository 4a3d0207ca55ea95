//! The relay worker: an explicit state machine over [`Phase`]s. Each phase
//! runs one step and names the next; [`phase::decide`] is where the worker
//! decides what to do next, `publish` is where a batch is published,
//! [`crate::relay::outcomes`] is where a publisher's outcomes become
//! retries, dead letters or an outage, and `ack` is where deliveries are
//! acknowledged.

mod ack;
mod idle;
mod look_behind;
mod pace;
mod phase;
mod publish;

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::watch;

use crate::error::{Error, Result};
use crate::publisher::Publisher;
use crate::relay::backoff::DoublingDelay;
use crate::relay::config::{RelayConfig, OUTAGE_BACKOFF_MIN_MS};
use crate::relay::cursor::{Cursor, Probe, Start};
use crate::relay::observe::{OutageKind, RelayObserver, RelayStats};
use crate::relay::ownership::{Claimable, Ownership};
use crate::relay::store::{Claimed, Store};
use crate::wakeup::Wakeup;
use ack::Published;
use pace::Pace;
use phase::{decide, idle_wait, Phase, Situation};

/// The relay worker: what it works with, and its own state between phases.
pub(crate) struct Worker {
    deps: Deps,
    /// Published but not yet acknowledged; the acknowledgement rides on the
    /// next claim.
    unacked: Option<Published>,
    /// The next batch, claimed while the previous (full) one was being
    /// published.
    prefetched: Option<Claimed>,
    /// How long a worker that keeps up waits between claims.
    pace: Pace,
    /// Idle polling: from `poll_min_ms`, doubling to `poll_max_ms`.
    idle: DoublingDelay,
    /// Waits after an outage, doubling to `outage_backoff_max_ms`.
    outage: DoublingDelay,
    /// When this instance last announced that it sleeps (producers' wake-up
    /// trigger then notifies); `None` while it has work.
    idle_announced: Option<Instant>,
    /// When this instance last published a batch: for [`idle::IDLE_LINGER`]
    /// after it, an empty claim polls again instead of announcing.
    last_work: Option<Instant>,
    /// A withdrawal of the idle announcement still running off the publish
    /// path; the next announcement waits for it, so they cannot cross.
    retracting: Option<tokio::task::JoinHandle<()>>,
    /// Where the next claim starts reading fresh rows.
    cursor: Cursor,
    /// A look behind the cursor still running beside the claims, and where
    /// its answer arrives.
    probe: Option<(Probe, tokio::sync::oneshot::Receiver<Result<Option<i64>>>)>,
    /// Whether the schema has the idle wake-up trigger (`None`: not known
    /// yet).
    idle_trigger: Option<bool>,
}

/// What a worker works with; the rest is its own state.
pub(crate) struct Deps {
    pub store: Arc<Store>,
    pub ownership: Arc<Ownership>,
    pub publisher: Arc<dyn Publisher>,
    pub config: RelayConfig,
    pub wakeup: Arc<Wakeup>,
    pub shutdown: watch::Receiver<bool>,
    pub stats: Arc<RelayStats>,
    pub observer: Option<Arc<dyn RelayObserver>>,
    /// Where to announce a departure, so others take over at once.
    pub channel: String,
    /// Opens publish spans for traced events (feature `opentelemetry`).
    #[cfg(feature = "opentelemetry")]
    pub tracer: Option<Arc<crate::trace::PublishTracer>>,
}

impl Worker {
    pub fn new(deps: Deps) -> Self {
        let idle = DoublingDelay::new(deps.config.poll_min_ms, deps.config.poll_max_ms);
        let outage = DoublingDelay::new(
            deps.config.poll_min_ms.max(OUTAGE_BACKOFF_MIN_MS),
            deps.config.outage_backoff_max_ms,
        );
        Worker {
            deps,
            unacked: None,
            prefetched: None,
            pace: Pace::default(),
            idle,
            outage,
            idle_announced: None,
            last_work: None,
            retracting: None,
            cursor: Cursor::new(),
            probe: None,
            idle_trigger: None,
        }
    }

    /// Runs phases until shutdown.
    pub async fn run(mut self) -> Result<()> {
        let mut phase = Phase::Decide;
        loop {
            phase = match phase {
                Phase::Decide => decide(Situation {
                    stopping: *self.deps.shutdown.borrow(),
                    release_due: self.deps.ownership.has_pending_release(),
                    claimable: self.deps.ownership.claimable(),
                    prefetched: self.prefetched.take(),
                }),
                Phase::Release => self.release().await,
                Phase::Park => self.park().await,
                Phase::Claim(claim) => self.claim(claim).await,
                Phase::Idle(claim) => self.idle(claim).await,
                Phase::Publish(claim, batch) => self.publish(claim, batch).await,
                Phase::BrokerDown(error) => self.broker_down(error).await,
                Phase::DatabaseDown(error) => self.database_down(error).await,
                Phase::Stop => {
                    self.stop().await;
                    return Ok(());
                }
            };
        }
    }

    /// Hands partitions over, with nothing claimed or in flight.
    async fn release(&mut self) -> Phase {
        self.prefetched = None;
        if !self.acknowledge_unacked().await {
            return Phase::Decide;
        }
        match self.deps.ownership.release_pending(&self.deps.store).await {
            Ok(0) => {}
            // Tell the new owners, so they take over now.
            Ok(_) => self.announce_rebalance().await,
            Err(e) => return Phase::DatabaseDown(e),
        }
        Phase::Decide
    }

    async fn park(&mut self) -> Phase {
        self.prefetched = None;
        // Nothing to claim: producers need not wake this instance.
        self.retract_idle().await;
        // A failure keeps the batch for the next claim to acknowledge.
        self.acknowledge_unacked().await;
        self.wait(Duration::from_millis(self.deps.config.poll_max_ms))
            .await;
        Phase::Decide
    }

    async fn claim(&mut self, claim: Claimable) -> Phase {
        let pace = self.pace.wait(Instant::now());
        if !pace.is_zero() {
            self.sleep(pace).await;
            if *self.deps.shutdown.borrow() {
                return Phase::Decide;
            }
        }
        let started = Instant::now();
        let acked = self.unacked_refs();
        let start = self.cursor_start(&claim.partitions);
        let claimed = self
            .deps
            .store
            .event_ack_and_claim(
                &claim.partitions,
                self.deps.config.batch_size,
                &acked,
                &acked.ids,
                start,
            )
            .await;
        match claimed {
            Ok(batch) => {
                if let Some(meta) = batch.meta {
                    self.cursor.observe(&claim.partitions, start.from, meta);
                }
                self.unacked_acknowledged();
                self.pace
                    .observe(started, batch.events.len(), self.deps.config.batch_size);
                if batch.events.is_empty() {
                    Phase::Idle(claim)
                } else {
                    Phase::Publish(claim, batch)
                }
            }
            Err(e) => Phase::DatabaseDown(e),
        }
    }

    async fn idle(&mut self, claim: Claimable) -> Phase {
        if self.lingering().await {
            self.wait(idle::IDLE_LINGER_POLL).await;
            return Phase::Decide;
        }
        let ttl = Duration::from_millis(self.deps.config.lease_ms);
        // About to sleep: announce it (only where the schema's idle trigger
        // is installed, and a relay that does not LISTEN has nothing to be
        // woken by), wait until every insert that could not see the
        // announcement has committed, then look once more, so none of them
        // is left for the poll. While asleep, keep the announcement alive.
        let first = self.idle_announced.is_none();
        let due = self.idle_announced.is_none_or(|at| at.elapsed() > ttl / 2);
        if self.deps.config.listen
            && due
            && self.idle_trigger().await
            && self.announce_idle(ttl).await
            && first
        {
            self.settle_after_announcing().await;
            return Phase::Claim(claim);
        }
        let poll = self.idle.next_delay();
        let next_retry = match self.deps.store.event_next_retry(&claim.partitions).await {
            Ok(next) => next,
            Err(e) => {
                tracing::debug!(error = %e.with_causes(), "could not read the next retry time; polling");
                None
            }
        };
        self.wait(idle_wait(poll, next_retry)).await;
        Phase::Decide
    }

    /// Publishes `batch`. A full batch (a backlog) is published while, on
    /// its own task, the database acknowledges the previous batch and claims
    /// the next (excluding this one, still in flight), so the round trip and
    /// the decoding of the rows run in parallel with publishing. A short one
    /// means the worker has caught up: nothing is claimed ahead, and its
    /// acknowledgement rides on the next claim, one pace later.
    async fn publish(&mut self, claim: Claimable, batch: Claimed) -> Phase {
        self.idle.reset();
        self.last_work = Some(Instant::now());
        if self.idle_announced.take().is_some() && self.deps.ownership.alone() {
            // Busy again: producers stop notifying (where no other relay may
            // be asleep on the announcement). Off the publish path.
            let store = self.deps.store.clone();
            self.retracting = Some(tokio::spawn(async move {
                if let Err(e) = store.idle_retract().await {
                    tracing::debug!(error = %e.with_causes(), "could not withdraw the idle announcement; it lapses by itself");
                }
            }));
        }
        let batch_size = self.deps.config.batch_size;
        let prefetch = (!Pace::caught_up(batch.events.len(), batch_size)).then(|| {
            let acked = self.unacked_refs();
            let mut exclude = acked.ids.clone();
            exclude.extend(batch.events.iter().map(|e| e.id));
            let start = self.cursor_start(&claim.partitions);
            let (store, partitions) = (self.deps.store.clone(), claim.partitions.clone());
            let started = Instant::now();
            let task = tokio::spawn(async move {
                store
                    .event_ack_and_claim(&partitions, batch_size, &acked, &exclude, start)
                    .await
            });
            (task, start, started)
        });
        let published = self.publish_releasing(batch, &claim).await;
        if let Some((task, start, started)) = prefetch {
            let next = match task.await {
                Ok(result) => result.map_err(|e| e.with_causes()),
                Err(panicked) => Err(format!("prefetch task failed: {panicked}")),
            };
            match next {
                Ok(next) => {
                    if let Some(meta) = next.meta {
                        self.cursor.observe(&claim.partitions, start.from, meta);
                    }
                    self.unacked_acknowledged();
                    self.pace.observe(started, next.events.len(), batch_size);
                    // The next batch was claimed before this one's outcome
                    // was known: it is only safe to publish if every event
                    // of this one was delivered (otherwise a successor could
                    // overtake an event that is to be retried).
                    if published.all_delivered() {
                        self.prefetched = Some(next);
                    }
                }
                Err(e) => tracing::debug!(error = %e, "prefetch failed; claiming afresh"),
            }
        }
        // If no prefetch acknowledged the previous batch (it failed, or this
        // batch followed a backlog's last prefetch), do it now.
        self.acknowledge_or_give_up().await;
        let outage = published.settlement.outage.clone();
        self.unacked = Some(published);
        match outage {
            None => {
                self.outage.reset();
                Phase::Decide
            }
            Some(error) => Phase::BrokerDown(error),
        }
    }

    async fn broker_down(&mut self, error: String) -> Phase {
        let delay = self.outage.next_delay();
        tracing::warn!(publisher = self.deps.publisher.name(), %error, retry_in_ms = delay.as_millis() as u64, "publisher unavailable; no attempts counted");
        if let Some(o) = &self.deps.observer {
            o.on_outage(OutageKind::Broker, &error);
        }
        // Acknowledge what got through before waiting.
        self.acknowledge_unacked().await;
        self.deps.store.connection_release();
        self.sleep(delay).await;
        Phase::Decide
    }

    async fn database_down(&mut self, error: Error) -> Phase {
        let delay = self.outage.next_delay();
        let message = error.with_causes();
        if error.is_missing_table() {
            // Named once per change by the lease round, which runs whether
            // or not this instance holds partitions.
            tracing::debug!(error = %message, "outbox tables missing; retrying");
        } else {
            tracing::warn!(error = %message, retry_in_ms = delay.as_millis() as u64, "database unavailable");
        }
        self.deps.stats.add_outage();
        if let Some(o) = &self.deps.observer {
            o.on_outage(OutageKind::Database, &message);
        }
        self.deps.store.connection_release();
        self.sleep(delay).await;
        Phase::Decide
    }

    /// Finishes: acknowledges what was delivered, releases every partition
    /// (announcing it, so others take over at once), closes the publisher.
    async fn stop(&mut self) {
        tracing::info!(
            instance = self.deps.ownership.me(),
            "relay stopping: releasing partitions"
        );
        self.acknowledge_or_give_up().await;
        self.retract_idle().await;
        match self.deps.ownership.release_all(&self.deps.store).await {
            Ok(()) => self.announce_rebalance().await,
            Err(e) => {
                tracing::warn!(error = %e.with_causes(), "could not release partitions; they move when the lease ends")
            }
        }
        self.deps.publisher.close().await;
        self.deps.store.connection_release();
    }

    /// Asks the other instances for a lease round now. Best effort: without
    /// it they still take over at their next round.
    async fn announce_rebalance(&self) {
        if let Err(e) = self.deps.store.rebalance_notify(&self.deps.channel).await {
            tracing::debug!(error = %e.with_causes(), "could not announce the rebalance; others take over at their next lease round");
        }
    }

    /// Where a claim of `partitions` starts reading fresh rows now. Takes in
    /// the answer of a finished look behind the cursor first (so this claim
    /// reads from what it found), then starts the next look when one is due
    /// for the partitions this claim reads; neither waits for the database.
    fn cursor_start(&mut self, partitions: &[i32]) -> Start {
        let now = Instant::now();
        self.probe_collect();
        let start = self.cursor.start_claim(partitions, now);
        if self.probe.is_none() {
            if let Some(probe) = self.cursor.probe_due(now) {
                self.probe_spawn(probe);
            }
        }
        start
    }

    /// Waits for a wake-up, `delay`, or shutdown, holding no connection.
    async fn wait(&mut self, delay: Duration) {
        self.deps.store.connection_release();
        let wakeup = self.deps.wakeup.clone();
        tokio::select! {
            _ = tokio::time::sleep(delay) => {}
            _ = wakeup.wait() => {}
            _ = self.deps.shutdown.changed() => {}
        }
    }

    /// Waits for `delay` or shutdown.
    async fn sleep(&mut self, delay: Duration) {
        tokio::select! {
            _ = tokio::time::sleep(delay) => {}
            _ = self.deps.shutdown.changed() => {}
        }
    }
}
