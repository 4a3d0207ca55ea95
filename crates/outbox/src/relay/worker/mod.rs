//! The relay worker: an explicit state machine over [`Phase`]s. Each phase
//! runs one step and names the next; [`phase::decide`] is where the worker
//! decides what to do next. A batch goes from `claim` (where it is claimed,
//! from where `claim_cursor` says) to `publish` (where it is published,
//! while the next one is claimed ahead and joins it if it answers while
//! calls are in flight, `ahead`, through [`crate::relay::deliver`], where a
//! publisher's outcomes become retries, dead letters or an outage) and
//! `ack` (where deliveries are acknowledged). `idle` is the phase without
//! work and the announcement that producers should wake the worker,
//! `dormant` when an idle worker ends to let its source watch instead,
//! `outage` the waits while a broker or the database is down, and `pace`
//! how long a worker that keeps up waits between claims.

mod ack;
mod ahead;
mod claim;
mod claim_cursor;
mod dormant;
mod idle;
mod outage;
mod pace;
mod phase;
mod publish;

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use crate::error::Result;
use crate::publisher::Publisher;
use crate::relay::backoff::DoublingDelay;
use crate::relay::config::{RelayConfig, OUTAGE_BACKOFF_MIN_MS};
use crate::relay::deliver::Core;
use crate::relay::observe::{RelayObserver, RelayStats};
use crate::relay::ownership::Ownership;
use crate::relay::store::{Claimed, Store};
use crate::wakeup::Wakeup;
use ack::Published;
use claim_cursor::ClaimCursor;
use idle::IdleState;
use pace::Pace;
use phase::{decide, Phase, Situation};

/// The relay worker: what it works with, and its own state between phases.
pub(crate) struct Worker {
    deps: Deps,
    /// Publishes batches in lanes and judges their outcomes, as the WAL reader does.
    core: Core,
    /// Published but not yet acknowledged; the acknowledgement rides on the
    /// next claim.
    unacked: Option<Published>,
    /// The next batch, claimed while the previous (full) one was being
    /// published.
    prefetched: Option<Claimed>,
    /// How long a worker that keeps up waits between claims.
    pace: Pace,
    /// Waits after an outage, doubling to `outage_backoff_max_ms`.
    outage: DoublingDelay,
    /// Where the next claim starts reading fresh rows.
    cursor: ClaimCursor,
    /// The wake-ups there had been when the last claim started or the last
    /// wait ended: the next wait ends at once if there has been one since.
    woken: u64,
    /// Its polling and announcement while claims find nothing.
    idle_state: IdleState,
}

/// How a worker ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Exit {
    /// Shutdown was asked for.
    Stopped,
    /// It went dormant (see [`Phase::Dormant`]); `woken` is the wake-up
    /// generation its last claim started from: any wake-up since means work
    /// it has not looked for. `retry_in`: when the earliest backoff of the
    /// partitions it held ends.
    Dormant {
        woken: u64,
        retry_in: Option<Duration>,
    },
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
    /// Idle this long, with producers told to wake it, the worker goes
    /// dormant ([`Phase::Dormant`]); `None`: never.
    pub dormant_after: Option<Duration>,
}

impl Worker {
    pub fn new(deps: Deps) -> Self {
        let poll = DoublingDelay::new(deps.config.poll_min_ms, deps.config.poll_max_ms);
        let outage = DoublingDelay::new(
            deps.config.poll_min_ms.max(OUTAGE_BACKOFF_MIN_MS),
            deps.config.outage_backoff_max_ms,
        );
        let pace = Pace::new(Duration::from_millis(deps.config.latency_budget_ms));
        let core = Core::new(
            deps.publisher.clone(),
            &deps.config,
            #[cfg(feature = "opentelemetry")]
            deps.tracer.clone(),
        );
        Worker {
            deps,
            core,
            unacked: None,
            prefetched: None,
            pace,
            outage,
            idle_state: IdleState::new(poll),
            cursor: ClaimCursor::new(),
            woken: 0,
        }
    }

    /// Runs phases until shutdown, or until it goes dormant.
    pub async fn run(mut self) -> Result<Exit> {
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
                    return Ok(Exit::Stopped);
                }
                Phase::Dormant(claim) => {
                    let retry_in = self.go_dormant(&claim.partitions).await;
                    return Ok(Exit::Dormant {
                        woken: self.woken,
                        retry_in,
                    });
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
        self.idle_state.announcement.retract(&self.deps);
        self.idle_state.announcement.retracted().await;
        // A failure keeps the batch for the next claim to acknowledge.
        self.acknowledge_unacked().await;
        self.wait(Duration::from_millis(self.deps.config.poll_max_ms))
            .await;
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
        self.idle_state.announcement.retract(&self.deps);
        self.idle_state.announcement.retracted().await;
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

    /// Waits for a wake-up, `delay`, or shutdown, holding no connection.
    async fn wait(&mut self, delay: Duration) {
        self.deps.store.connection_release();
        let wakeup = self.deps.wakeup.clone();
        tokio::select! {
            _ = tokio::time::sleep(delay) => {}
            _ = wakeup.wait_since(self.woken) => {}
            _ = self.deps.shutdown.changed() => {}
        }
        // Whatever ended it, what comes next looks for work (or has none to
        // look for, parked): the wake-ups so far are taken in.
        self.woken = wakeup.generation();
    }

    /// Waits for `delay` or shutdown.
    async fn sleep(&mut self, delay: Duration) {
        tokio::select! {
            _ = tokio::time::sleep(delay) => {}
            _ = self.deps.shutdown.changed() => {}
        }
    }
}
