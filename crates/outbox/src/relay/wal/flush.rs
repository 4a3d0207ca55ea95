//! One batch of the stream, from the session's hand to the slot's
//! confirmation: the events whose aggregate waits in the table (or whose
//! type is paused) split off, the rest published through the delivery core
//! ([`super::settle`]) while the stream is read ahead ([`super::ahead`]),
//! what was not delivered set aside in the table, each batch reported, and
//! only then the slot confirmed past it. The database being down is waited
//! out; nothing is confirmed meanwhile.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use pgwire_replication::{Lsn, ReplicationClient};

use super::ahead::{Joined, ReadAhead};
use super::hand::InHand;
use super::reader::Reader;
use super::set_aside::Aside;
use super::settle::{Publishing, Settled};
use crate::error::Error;
use crate::event::Event;
use crate::relay::backoff::DoublingDelay;
use crate::relay::deliver::pauses::Pauses;
use crate::relay::observe::{BatchReport, OutageKind};

impl Reader {
    /// Publishes `batch`, sets its failures aside, then confirms `end` (the
    /// end of the last whole transaction in it; `None` for a batch cut out
    /// of a transaction still streaming). Meanwhile the stream is read
    /// ahead, and what joins the batch ([`super::ahead`]) is settled and
    /// confirmed with it. `Ok(false)` when the relay was told to stop
    /// first, `Err` when the session no longer holds the slot: nothing is
    /// confirmed.
    pub(super) async fn flush(
        &mut self,
        client: &mut ReplicationClient,
        hand: &mut InHand,
        batch: Vec<Event>,
        end: Option<Lsn>,
    ) -> std::result::Result<bool, String> {
        if batch.is_empty() {
            if let Some(end) = end {
                self.confirm(client, end);
            }
            return Ok(true);
        }
        let started = Instant::now();
        let claimed = batch.len();
        let (batch, dead) = self.incoming.admission.dead_among(batch);
        let Some((events, behind, pauses)) = self.split_behind(batch).await else {
            return Ok(false);
        };
        let observer = self.observer.clone();
        let stats = self.stats.clone();
        let on_outage = move |error: &str| {
            stats.add_outage();
            if let Some(o) = &observer {
                o.on_outage(OutageKind::Broker, error);
            }
        };
        let ahead = ReadAhead {
            client: &mut *client,
            hand,
            incoming: &mut self.incoming,
            blocked: &self.blocked,
            pauses: &pauses,
            batch_size: self.config.batch_size,
            read: claimed,
        };
        let mut publishing = Publishing {
            core: &self.core,
            outage_backoff_max_ms: self.config.outage_backoff_max_ms,
            shutdown: &mut self.shutdown,
            on_outage: &on_outage,
        };
        let Some(mut settled) = publishing.batch(events, behind, Some(ahead.start())).await else {
            return Ok(false);
        };
        settled.add_dead(dead);
        let mut joined = std::mem::take(&mut settled.joined);
        let (mut read, mut end) = (claimed, end);
        for part in &mut joined {
            read += part.claimed;
            end = part.end.or(end);
            settled.add_dead(std::mem::take(&mut part.dead));
        }
        if !self.store_aside(&settled).await? {
            return Ok(false);
        }
        self.report(claimed, &joined, &mut settled, started);
        // Counted here: a batch cut out of a transaction is confirmed
        // with the transaction's end, in a later call.
        self.position.published(read as u64);
        if let Some(end) = end {
            self.confirm(client, end);
        }
        Ok(true)
    }

    /// Lets the slot move to `end`, and saves it beside the slot.
    pub(super) fn confirm(&mut self, client: &ReplicationClient, end: Lsn) {
        client.update_applied_lsn(end);
        self.position.confirmed(end);
        self.incoming.admission.confirmed();
    }

    /// Splits off the events whose aggregate has an event waiting in the
    /// table, or whose type is paused; with the pauses they were checked
    /// against. `None` when the relay stops while the database is down.
    async fn split_behind(
        &mut self,
        batch: Vec<Event>,
    ) -> Option<(Vec<Event>, Vec<Event>, Pauses)> {
        let mut wait = DoublingDelay::new(100, self.config.outage_backoff_max_ms);
        let pauses = loop {
            match self.pauses.current().await {
                Ok(p) => break p.clone(),
                Err(e) => {
                    if !self.database_down(&e, wait.next_delay()).await {
                        return None;
                    }
                }
            }
        };
        if !pauses.is_empty() {
            for e in &batch {
                if pauses.hold(e) {
                    self.blocked.insert(e.aggregate_id.clone());
                }
            }
        }
        if !self.blocked.is_empty() {
            let among: Vec<&str> = batch
                .iter()
                .filter(|e| !pauses.hold(e))
                .map(|e| e.aggregate_id.as_str())
                .filter(|a| self.blocked.contains(*a))
                .collect::<HashSet<_>>()
                .into_iter()
                .collect();
            if !among.is_empty() {
                let mut wait = DoublingDelay::new(100, self.config.outage_backoff_max_ms);
                let still = loop {
                    match self.aside.aggregates_pending_among(&among).await {
                        Ok(still) => break still,
                        Err(e) => {
                            if !self.database_down(&e, wait.next_delay()).await {
                                return None;
                            }
                        }
                    }
                };
                for a in among {
                    if !still.contains(a) {
                        self.blocked.remove(a);
                    }
                }
            }
        }
        if self.blocked.is_empty() {
            return Some((batch, Vec::new(), pauses));
        }
        let (send, behind) = batch
            .into_iter()
            .partition(|e| !self.blocked.contains(&e.aggregate_id));
        Some((send, behind, pauses))
    }

    /// Writes the events set aside; retried while the database is down.
    /// `Err` when this reader's session no longer holds the slot: nothing
    /// was stored, and the batch is left to the slot's next reader.
    async fn store_aside(&mut self, settled: &Settled) -> std::result::Result<bool, String> {
        if settled.aside.is_empty() {
            return Ok(true);
        }
        let mut wait = DoublingDelay::new(100, self.config.outage_backoff_max_ms);
        loop {
            match self
                .aside
                .events_set_aside(&settled.aside, &self.slot, self.fence)
                .await
            {
                Ok(true) => break,
                Ok(false) => {
                    return Err(format!(
                        "this relay's session no longer holds replication slot {}: the batch's {} events to set aside are left to the slot's next reader",
                        self.slot,
                        settled.aside.len()
                    ))
                }
                Err(e) => {
                    if !self.database_down(&e, wait.next_delay()).await {
                        return Ok(false);
                    }
                }
            }
        }
        self.wakeup.wake_local();
        for (e, why) in &settled.aside {
            if let Aside::Dead { error } = why {
                tracing::warn!(event_id = %e.id, event_type = %e.event_type, aggregate_id = %e.aggregate_id, %error, "event dead-lettered");
            }
            self.blocked.insert(e.aggregate_id.clone());
        }
        Ok(true)
    }

    /// Logs a database failure and waits `wait`; `false` if the relay is
    /// told to stop meanwhile. Either way the slot holds the batch: a
    /// server that is down is waited for; one that refuses what is asked
    /// (a permission, a constraint added by hand, a read-only server) is
    /// said to as an error with its fix, and asked again after each wait
    /// until the cause is fixed.
    async fn database_down(&mut self, e: &Error, wait: Duration) -> bool {
        let mut error = e.with_causes();
        if e.is_retriable() {
            tracing::warn!(%error, "database unavailable; the slot holds the batch");
        } else {
            let fix = refused_fix(e.sqlstate().as_deref());
            tracing::error!(%error, "the database refuses what the WAL reader asks of it; the slot holds the batch (nothing is lost) and it is asked again every {} s until the cause is fixed: {fix}", wait.as_secs().max(1));
            error = format!("{error}; {fix}");
        }
        self.stats.add_outage();
        if let Some(o) = &self.observer {
            o.on_outage(OutageKind::Database, &error);
        }
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = self.shutdown.changed() => {}
        }
        !*self.shutdown.borrow()
    }

    /// Reports each batch published as one on its own, as it was read:
    /// the first (`claimed` events), then each that joined it.
    fn report(&self, claimed: usize, joined: &[Joined], settled: &mut Settled, started: Instant) {
        if joined.is_empty() {
            return self.report_one(claimed, &settled.delivered, &settled.aside, started);
        }
        // Which batch each event was read in: 0 the first, k the k-th
        // that joined it. The deliveries are grouped by it in place (in
        // order within each), not copied.
        let part_of = |e: &Event| {
            joined
                .iter()
                .position(|p| p.ids.contains(&e.id))
                .map_or(0, |k| k + 1)
        };
        settled.delivered.sort_by_cached_key(part_of);
        let mut delivered = settled.delivered.as_slice();
        let claims = std::iter::once(claimed).chain(joined.iter().map(|p| p.claimed));
        for (part, claimed) in claims.enumerate() {
            let n = delivered.iter().take_while(|e| part_of(e) == part).count();
            let (mine, rest) = delivered.split_at(n);
            delivered = rest;
            let aside: Vec<(Event, Aside)> = settled
                .aside
                .iter()
                .filter(|(e, _)| part_of(e) == part)
                .cloned()
                .collect();
            self.report_one(claimed, mine, &aside, started);
        }
    }

    fn report_one(
        &self,
        claimed: usize,
        delivered: &[Event],
        aside: &[(Event, Aside)],
        started: Instant,
    ) {
        let mut retried = Vec::new();
        let mut dead = Vec::new();
        for (e, why) in aside {
            match why {
                Aside::Retry { error, .. } => retried.push((e.clone(), error.clone())),
                Aside::Dead { error } => dead.push((e.clone(), error.clone())),
                Aside::Behind => {}
            }
        }
        let report = BatchReport {
            claimed,
            delivered,
            retried: &retried,
            dead_lettered: &dead,
            outage: None,
            acked_at: chrono::Utc::now(),
            duration: started.elapsed(),
        };
        self.stats.add(&report);
        if let Some(o) = &self.observer {
            o.on_batch(&report);
        }
    }
}

/// What fixes a database error that waiting does not, by its SQLSTATE.
fn refused_fix(sqlstate: Option<&str>) -> &'static str {
    match sqlstate {
        Some("42501") => {
            "grant the relay's role SELECT, INSERT, UPDATE and DELETE on the schema's outbox tables"
        }
        Some(c) if c.starts_with("23") => {
            "a constraint of outbox_events refuses the rows: drop the constraint added to the table by hand, or run outbox migrate to restore its definition"
        }
        Some("25006") => {
            "the database URL reaches a read-only server: point the relay at the primary"
        }
        Some("42P01" | "3F000") => "the outbox's tables are missing: run outbox migrate",
        _ => "read the error above; nothing is confirmed past the batch meanwhile",
    }
}
