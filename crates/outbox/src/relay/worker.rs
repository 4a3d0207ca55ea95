//! The relay loop: claim a batch from the owned partitions, publish it in
//! per-aggregate waves, acknowledge it, repeat.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::watch;
use uuid::Uuid;

use crate::error::{Error, Result};
use crate::event::Event;
use crate::publisher::{Outcome, Publisher};
use crate::relay::backoff::{retry_delay, OutageBackoff};
use crate::relay::config::{RelayConfig, Retention};
use crate::relay::observe::{BatchReport, OutageKind, RelayObserver, RelayStats};
use crate::relay::ownership::{Claimable, Ownership};
use crate::relay::store::{Claimed, Failure, RowRefs, Store};
use crate::relay::waves::into_waves;
use crate::wakeup::Wakeup;

pub(crate) struct Worker {
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
    /// The outbox tables were missing at the last database error (logged
    /// once per change, not at every retry).
    pub tables_missing: bool,
}

/// A published batch whose deliveries still await their acknowledgement,
/// which rides on the next claim.
struct Published {
    claimed: usize,
    /// Events skipped without an outcome (successors of a failure, lapsed
    /// leases, an outage).
    skipped: usize,
    started: Instant,
    delivered: Vec<Event>,
    retried: Vec<(Event, String)>,
    dead: Vec<(Event, String)>,
    outage: Option<String>,
    /// Row locations of the claimed events, by id.
    ctids: std::collections::HashMap<uuid::Uuid, String>,
}

impl Published {
    /// The delivered events' rows, for the acknowledgement.
    fn refs(&self) -> RowRefs {
        let mut refs = RowRefs {
            ctids: Vec::with_capacity(self.delivered.len()),
            ids: Vec::with_capacity(self.delivered.len()),
        };
        for e in &self.delivered {
            if let Some(ct) = self.ctids.get(&e.id) {
                refs.ctids.push(ct.clone());
                refs.ids.push(e.id);
            }
        }
        refs
    }

    fn all_delivered(&self) -> bool {
        self.outage.is_none() && self.skipped == 0 && self.delivered.len() == self.claimed
    }
}

impl Worker {
    pub async fn run(mut self) -> Result<()> {
        let mut idle = OutageBackoff::new(self.config.poll_min_ms, self.config.poll_max_ms);
        let mut outage = OutageBackoff::new(
            self.config.poll_min_ms.max(20),
            self.config.outage_backoff_max_ms,
        );
        // Published but not yet acknowledged; the acknowledgement rides on
        // the next claim.
        let mut unacked: Option<Published> = None;
        // The next batch, claimed while the previous one was being published.
        let mut prefetched: Option<Claimed> = None;
        while !*self.shutdown.borrow() {
            if self.ownership.has_pending_release() {
                // Hand partitions over only with nothing claimed or in flight.
                prefetched = None;
                if let Some(done) = unacked.take() {
                    unacked = self.acknowledge(done).await;
                    if unacked.is_some() {
                        continue;
                    }
                }
                match self.ownership.release_pending(&self.store).await {
                    Ok(0) => {}
                    // Tell the new owners, so they take over now.
                    Ok(_) => {
                        let _ = self.store.rebalance_notify(&self.channel).await;
                    }
                    Err(e) => {
                        self.database_down(&e, &mut outage).await;
                        continue;
                    }
                }
            }
            let claim = self.ownership.claimable();
            if claim.partitions.is_empty() {
                prefetched = None;
                if let Some(done) = unacked.take() {
                    unacked = self.acknowledge(done).await;
                }
                self.wait(Duration::from_millis(self.config.poll_max_ms))
                    .await;
                continue;
            }
            let batch = match prefetched.take().filter(|b| !b.events.is_empty()) {
                Some(batch) => batch,
                None => {
                    let acked = unacked.as_ref().map(Published::refs).unwrap_or_default();
                    match self
                        .store
                        .event_ack_and_claim(
                            &claim.partitions,
                            self.config.batch_size,
                            &acked,
                            &acked.ids,
                        )
                        .await
                    {
                        Ok(batch) => {
                            self.tables_back();
                            if let Some(done) = unacked.take() {
                                self.report(done);
                            }
                            batch
                        }
                        Err(e) => {
                            self.database_down(&e, &mut outage).await;
                            continue;
                        }
                    }
                }
            };
            if batch.events.is_empty() {
                let mut delay = idle.next_delay();
                if let Ok(Some(retry)) = self.store.event_next_retry(&claim.partitions).await {
                    delay = delay.min(retry + Duration::from_millis(1));
                }
                self.wait(delay).await;
                continue;
            }
            idle.reset();

            // Publish this batch while the database acknowledges the previous
            // one and claims the next (excluding this one, still in flight).
            let acked = unacked.as_ref().map(Published::refs).unwrap_or_default();
            let mut exclude = acked.ids.clone();
            exclude.extend(batch.events.iter().map(|e| e.id));
            // On its own task, so the round trip and the decoding of the rows
            // run in parallel with publishing, not just interleaved with it.
            let prefetch = {
                let (store, partitions) = (self.store.clone(), claim.partitions.clone());
                let limit = self.config.batch_size;
                tokio::spawn(async move {
                    store
                        .event_ack_and_claim(&partitions, limit, &acked, &exclude)
                        .await
                })
            };
            let mut published = self.publish(batch.events, &batch.undecodable, &claim).await;
            published.ctids = batch.ctids;
            let next = match prefetch.await {
                Ok(result) => result.map_err(|e| e.to_string()),
                Err(panicked) => Err(format!("prefetch task failed: {panicked}")),
            };
            match next {
                Ok(next) => {
                    if let Some(done) = unacked.take() {
                        self.report(done);
                    }
                    // The next batch was claimed before this one's outcome
                    // was known: it is only safe to publish if every event of
                    // this one was delivered (otherwise a successor could
                    // overtake an event that is to be retried).
                    if published.all_delivered() {
                        prefetched = Some(next);
                    }
                }
                Err(e) => tracing::debug!(error = %e, "prefetch failed; claiming afresh"),
            }
            if let Some(previous) = unacked.take() {
                // The prefetch could not acknowledge it: do it now.
                if let Some(still) = self.acknowledge(previous).await {
                    self.report_lost_ack(&still);
                }
            }
            match &published.outage {
                None => outage.reset(),
                Some(error) => {
                    let delay = outage.next_delay();
                    tracing::warn!(publisher = self.publisher.name(), %error, retry_in_ms = delay.as_millis() as u64, "publisher unavailable; no attempts counted");
                    if let Some(o) = &self.observer {
                        o.on_outage(OutageKind::Broker, error);
                    }
                    // Acknowledge what got through before waiting.
                    unacked = self.acknowledge(published).await;
                    self.sleep(delay).await;
                    continue;
                }
            }
            unacked = Some(published);
        }
        tracing::info!(
            instance = self.ownership.me(),
            "relay stopping: releasing partitions"
        );
        if let Some(done) = unacked.take() {
            if let Some(still) = self.acknowledge(done).await {
                self.report_lost_ack(&still);
            }
        }
        match self.ownership.release_all(&self.store).await {
            Ok(()) => {
                let _ = self.store.rebalance_notify(&self.channel).await;
            }
            Err(e) => {
                tracing::warn!(error = %e, "could not release partitions; they move when the lease ends")
            }
        }
        self.publisher.close().await;
        Ok(())
    }

    fn report_lost_ack(&self, batch: &Published) {
        tracing::warn!(
            events = batch.delivered.len(),
            "could not acknowledge delivered events; they will be delivered again"
        );
    }

    async fn database_down(&mut self, error: &Error, backoff: &mut OutageBackoff) {
        let delay = backoff.next_delay();
        let message = error.with_causes();
        if error.is_missing_table() {
            if !self.tables_missing {
                tracing::error!(error = %message, "the outbox tables are missing (schema dropped?): run `outbox migrate`; retrying until they are back");
                self.tables_missing = true;
            }
        } else {
            tracing::warn!(error = %message, retry_in_ms = delay.as_millis() as u64, "database unavailable");
        }
        self.stats.add_outage();
        if let Some(o) = &self.observer {
            o.on_outage(OutageKind::Database, &message);
        }
        self.sleep(delay).await;
    }

    /// A claim succeeded: if the tables had been missing, say they are back.
    fn tables_back(&mut self) {
        if std::mem::take(&mut self.tables_missing) {
            tracing::info!("the outbox tables are back; relaying again");
        }
    }

    /// Waits for a wake-up, `delay`, or shutdown.
    async fn wait(&mut self, delay: Duration) {
        let wakeup = self.wakeup.clone();
        tokio::select! {
            _ = tokio::time::sleep(delay) => {}
            _ = wakeup.wait() => {}
            _ = self.shutdown.changed() => {}
        }
    }

    /// Waits for `delay` or shutdown.
    async fn sleep(&mut self, delay: Duration) {
        tokio::select! {
            _ = tokio::time::sleep(delay) => {}
            _ = self.shutdown.changed() => {}
        }
    }

    /// Publishes one batch in waves and records its failures (fenced). The
    /// deliveries are acknowledged later, with the next claim.
    ///
    /// Rows that could not be decoded are never sent: each is dead-lettered
    /// with its reason, exactly like an event the broker rejected.
    async fn publish(
        &self,
        batch: Vec<Event>,
        undecodable: &HashMap<Uuid, String>,
        claim: &Claimable,
    ) -> Published {
        let started = Instant::now();
        let claimed = batch.len();
        let timeout = Duration::from_millis(self.config.publish_timeout_ms);
        let mut blocked: HashSet<String> = HashSet::new();
        let mut delivered: Vec<Event> = Vec::with_capacity(claimed);
        let mut retried: Vec<(Event, String)> = Vec::new();
        let mut dead: Vec<(Event, String)> = Vec::new();
        let mut failures: Vec<Failure> = Vec::new();
        let mut outage: Option<String> = None;

        for wave in into_waves(batch) {
            if outage.is_some() {
                break;
            }
            let wave: Vec<Event> = if blocked.is_empty() {
                wave
            } else {
                wave.into_iter()
                    .filter(|e| !blocked.contains(&e.aggregate_id))
                    .collect()
            };
            // Never publish from a partition whose lease is about to lapse:
            // its next owner may already be publishing.
            let valid = self.ownership.still_valid();
            let (wave, lapsed): (Vec<Event>, Vec<Event>) = wave
                .into_iter()
                .partition(|e| valid.get(e.partition as usize) == Some(&true));
            for e in lapsed {
                blocked.insert(e.aggregate_id);
            }
            let wave: Vec<Event> = if undecodable.is_empty() {
                wave
            } else {
                let (bad, good): (Vec<Event>, Vec<Event>) = wave
                    .into_iter()
                    .partition(|e| undecodable.contains_key(&e.id));
                for event in bad {
                    let error = undecodable[&event.id].clone();
                    failures.push(Failure {
                        id: event.id,
                        error: error.clone(),
                        delay: Duration::ZERO,
                        dead: true,
                    });
                    blocked.insert(event.aggregate_id.clone());
                    dead.push((event, error));
                }
                good
            };
            if wave.is_empty() {
                continue;
            }
            let outcomes = match tokio::time::timeout(timeout, self.publisher.publish(&wave)).await
            {
                Err(_) => {
                    outage = Some(format!(
                        "publish timed out after {} ms",
                        timeout.as_millis()
                    ));
                    break;
                }
                Ok(Err(e)) => {
                    outage = Some(e.message);
                    break;
                }
                Ok(Ok(outcomes)) => outcomes,
            };
            if outcomes.len() != wave.len() {
                tracing::error!(
                    publisher = self.publisher.name(),
                    events = wave.len(),
                    outcomes = outcomes.len(),
                    "publisher returned the wrong number of outcomes; missing ones are retried"
                );
            }
            let n = wave.len();
            let mut outcomes = outcomes.into_iter();
            for event in wave {
                let outcome = outcomes.next().unwrap_or_else(|| {
                    Outcome::Retry(format!("publisher returned no outcome ({n} events sent)"))
                });
                match outcome {
                    Outcome::Delivered => delivered.push(event),
                    Outcome::Retry(error) => {
                        let attempts = event.attempts.max(0) as u32 + 1;
                        let give_up = attempts >= self.config.max_attempts;
                        failures.push(Failure {
                            id: event.id,
                            error: error.clone(),
                            delay: retry_delay(
                                attempts,
                                self.config.backoff_base_ms,
                                self.config.backoff_max_ms,
                            ),
                            dead: give_up,
                        });
                        blocked.insert(event.aggregate_id.clone());
                        if give_up {
                            dead.push((event, error));
                        } else {
                            retried.push((event, error));
                        }
                    }
                    Outcome::Unavailable(error) => {
                        // Not sent: no attempt counted, successors held, and
                        // the batch ends here as an outage.
                        blocked.insert(event.aggregate_id.clone());
                        outage.get_or_insert(error);
                    }
                    Outcome::Rejected(error) => {
                        failures.push(Failure {
                            id: event.id,
                            error: error.clone(),
                            delay: Duration::ZERO,
                            dead: true,
                        });
                        blocked.insert(event.aggregate_id.clone());
                        dead.push((event, error));
                    }
                }
            }
        }

        if !failures.is_empty() {
            // Failures are written before the next claim, so the next claim
            // already skips the aggregates now in backoff.
            match self
                .store
                .event_mark_failed(&failures, self.ownership.me(), &claim.epochs)
                .await
            {
                Ok(n) if (n as usize) < failures.len() => {
                    let lost = failures.len() as u64 - n;
                    tracing::warn!(lost, "failure updates fenced out: partitions changed owner");
                    self.stats.add_fenced_out(lost);
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!(error = %e, "could not record failures; the events will be retried")
                }
            }
            for (e, error) in &dead {
                tracing::warn!(event_id = %e.id, event_type = %e.event_type, aggregate_id = %e.aggregate_id, %error, "event dead-lettered");
            }
        }
        let outcomes = delivered.len() + retried.len() + dead.len();
        Published {
            claimed,
            skipped: claimed - outcomes,
            started,
            delivered,
            retried,
            dead,
            outage,
            ctids: Default::default(),
        }
    }

    /// Acknowledges a published batch on its own (when no claim follows),
    /// retrying briefly through a database blip. Returns the batch back if
    /// that failed; its events are then delivered again (at least once).
    async fn acknowledge(&mut self, done: Published) -> Option<Published> {
        if done.delivered.is_empty() {
            self.report(done);
            return None;
        }
        let ids: Vec<uuid::Uuid> = done.delivered.iter().map(|e| e.id).collect();
        let keep = self.config.retention == Retention::Keep;
        let mut delay = Duration::from_millis(50);
        for attempt in 1..=5 {
            match self.store.event_mark_delivered(&ids, keep).await {
                Ok(_) => {
                    self.report(done);
                    return None;
                }
                Err(e) => {
                    tracing::warn!(error = %e, attempt, "acknowledgement failed; retrying");
                    self.sleep(delay).await;
                    delay *= 2;
                }
            }
        }
        Some(done)
    }

    /// Counts an acknowledged batch and tells the observer.
    fn report(&self, done: Published) {
        let report = BatchReport {
            claimed: done.claimed,
            delivered: &done.delivered,
            retried: &done.retried,
            dead_lettered: &done.dead,
            outage: done.outage.as_deref(),
            acked_at: chrono::Utc::now(),
            duration: done.started.elapsed(),
        };
        self.stats.add(&report);
        if let Some(o) = &self.observer {
            o.on_batch(&report);
        }
    }
}
