//! The stream: the slot's messages of this schema gathered into batches at
//! transaction ends, each batch published, its failures set aside in the
//! table, and only then the slot confirmed past it ([`super::flush`]). A
//! session that ends (the server restarting, the network) is opened again
//! from the slot's confirmed position, so what was not confirmed is read
//! again: at least once, never skipped.

use std::collections::HashSet;
use std::ops::ControlFlow;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use pgwire_replication::{Lsn, ReplicationClient, ReplicationEvent};
use tokio::sync::watch;

use super::check::Refusal;
use super::hand::InHand;
use super::incoming::Incoming;
use super::position::Position;
use super::session::{self, NotStarted, Session};
use super::set_aside::SetAside;
use super::switch::{self, Gone, Mark};
use super::ReplicationTarget;
use crate::error::{Error, Result};
use crate::relay::backoff::DoublingDelay;
use crate::relay::config::RelayConfig;
use crate::relay::deliver::pauses::PauseWatch;
use crate::relay::deliver::Core;
use crate::relay::observe::{OutageKind, RelayObserver, RelayStats};
use crate::wakeup::Wakeup;

/// What the relay's owner can read of the reader while it runs.
#[derive(Debug, Default)]
pub struct SlotState {
    active: AtomicBool,
    switched: AtomicBool,
}

impl SlotState {
    /// Whether this relay is the slot's reader right now.
    pub fn active(&self) -> bool {
        self.active.load(Ordering::Relaxed)
    }

    /// Whether the reader ended because the schema went back to the table
    /// mode and the slot was read to the switch.
    pub fn finished_cleanly(&self) -> bool {
        self.switched.load(Ordering::Relaxed)
    }
}

/// The reader of one schema's slot.
pub(crate) struct Reader {
    pub target: ReplicationTarget,
    pub slot: String,
    pub publication: String,
    pub aside: SetAside,
    pub switch: switch::Switch,
    pub position: Position,
    /// Publishes as the table worker does: lanes, timeout, spans, outcomes.
    pub core: Core,
    /// What is paused: paused events are set aside, where the pause holds
    /// them as it holds every row.
    pub pauses: PauseWatch,
    pub config: RelayConfig,
    pub stats: Arc<RelayStats>,
    pub observer: Option<Arc<dyn RelayObserver>>,
    pub shutdown: watch::Receiver<bool>,
    pub state: Arc<SlotState>,
    /// Aggregates with an event waiting in the table: their next events
    /// wait there behind it. Read when a session starts; checked again
    /// before each batch that holds one.
    pub blocked: HashSet<String>,
    /// Where the pending switch back to the table mode put its mark.
    pub switch_mark: Option<Lsn>,
    /// The walsender of this reader's session: what it sets aside is
    /// stored only while that session holds the slot.
    pub fence: i32,
    /// This relay's table worker, woken when events are set aside.
    pub wakeup: Arc<Wakeup>,
    /// Each message of this schema into an event, or refused.
    pub incoming: Incoming,
}

/// How a session ended without an error.
enum Ended {
    /// The relay is stopping.
    Stopped,
    /// The schema went back to the table mode and the slot is read to the
    /// switch: nothing more to read.
    Switched,
}

/// What the stream gives a session next.
enum Received {
    /// The relay is stopping.
    Stop,
    /// Nothing more is waiting while a whole transaction or more is in
    /// hand: the time to publish it.
    Idle,
    /// The next event of the stream.
    Event(ReplicationEvent),
}

/// Opens the first session before the relay counts as started, so that a
/// setup the mode cannot run on is refused at once. `Ok(None)`: another
/// relay reads the slot, and this one stands by; or the slot is gone while
/// a switch back to the table mode needs no more of it, which the reader
/// ends when it runs.
pub(crate) async fn first_session(
    target: &ReplicationTarget,
    slot: &str,
    publication: &str,
    position: &Position,
    switch: &switch::Switch,
) -> Result<Option<Session>> {
    let start = position.saved().await?;
    match session::open(target, slot, publication, STATUS_INTERVAL, start).await {
        Ok(session) => Ok(Some(session)),
        Err(NotStarted::SlotBusy(message)) => {
            tracing::info!(slot, "{message}");
            Ok(None)
        }
        Err(NotStarted::SlotGone(health)) => match switch.slot_gone(slot, health).await? {
            Gone::Fatal(reason) => Err(Error::invalid("replication", reason)),
            Gone::Forgotten | Gone::SwitchEnded => Ok(None),
        },
        Err(NotStarted::NoSender(reason))
        | Err(NotStarted::Refused(reason))
        | Err(NotStarted::Failed(reason)) => Err(Error::invalid("replication", reason)),
    }
}

/// How soon a confirmed position is reported to the server (at most this
/// often): what a relay killed right after confirming may read again. The
/// session reports on its own task, also while a broker outage holds the
/// stream, so the server never times it out.
const STATUS_INTERVAL: Duration = Duration::from_millis(10);

impl Reader {
    /// Reads the slot until the relay stops, the schema has switched back
    /// to the table, or the server refuses the session for good.
    pub(crate) async fn run(mut self, first: Option<Session>) -> Result<()> {
        let mut first = first;
        let mut retry = DoublingDelay::new(200, self.config.outage_backoff_max_ms);
        let standby = Duration::from_millis((self.config.lease_ms / 4).clamp(100, 1_000));
        let mut standing_by = false;
        loop {
            if *self.shutdown.borrow() {
                return Ok(());
            }
            let opened = match first.take() {
                Some(session) => Ok(session),
                None => self.open().await,
            };
            let next = match opened {
                Ok(session) => {
                    standing_by = false;
                    retry.reset();
                    self.session(session).await
                }
                Err(NotStarted::SlotBusy(message)) => {
                    if !standing_by {
                        tracing::info!(slot = %self.slot, "{message}");
                        standing_by = true;
                    }
                    ControlFlow::Continue(Some(standby))
                }
                Err(not_started) => self.not_started(not_started).await,
            };
            let wait = match next {
                ControlFlow::Break(ended) => return ended,
                ControlFlow::Continue(wait) => wait.unwrap_or_else(|| retry.next_delay()),
            };
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                _ = self.shutdown.changed() => {}
            }
        }
    }

    /// Opens a session from the position saved beside the slot.
    async fn open(&mut self) -> std::result::Result<Session, NotStarted> {
        let start = self
            .position
            .saved()
            .await
            .map_err(|e| NotStarted::Failed(e.with_causes().to_string()))?;
        session::open(
            &self.target,
            &self.slot,
            &self.publication,
            STATUS_INTERVAL,
            start,
        )
        .await
    }

    /// Reads one session to its end. Breaks when the reader is done (the
    /// relay stops, the switch back to the table ended); continues, to
    /// open another after the doubling wait (`None`), when the stream
    /// failed.
    async fn session(
        &mut self,
        Session { mut client, pid }: Session,
    ) -> ControlFlow<Result<()>, Option<Duration>> {
        self.fence = pid;
        self.state.active.store(true, Ordering::Relaxed);
        tracing::info!(slot = %self.slot, "reading the replication slot");
        let ended = match self.session_started().await {
            Ok(true) => {
                let _ = client.shutdown().await;
                Ok(Ended::Switched)
            }
            Ok(false) => self.stream(client).await,
            Err(e) => {
                client.stop();
                Err(e.with_causes().to_string())
            }
        };
        self.state.active.store(false, Ordering::Relaxed);
        match ended {
            Ok(Ended::Stopped) => ControlFlow::Break(Ok(())),
            Ok(Ended::Switched) => {
                if let Err(e) = self.switch.finish(&self.slot).await {
                    return ControlFlow::Break(Err(e));
                }
                self.state.switched.store(true, Ordering::Relaxed);
                ControlFlow::Break(Ok(()))
            }
            Err(error) => {
                tracing::warn!(slot = %self.slot, %error, "replication stream ended; reading again from the slot's confirmed position");
                if let Some(o) = &self.observer {
                    o.on_outage(OutageKind::Database, &error);
                }
                ControlFlow::Continue(None)
            }
        }
    }

    /// A session that did not open (a busy slot aside): breaks when the
    /// reader is done (the slot is gone for good, or refused), continues
    /// after the doubling wait (`None`) when it may open later.
    async fn not_started(&mut self, why: NotStarted) -> ControlFlow<Result<()>, Option<Duration>> {
        match why {
            NotStarted::SlotGone(health) => match self.switch.slot_gone(&self.slot, health).await {
                Ok(Gone::Forgotten) => {
                    tracing::info!(slot = %self.slot, "the schema is back in the table mode and its slot is dropped: nothing more to read");
                    self.state.switched.store(true, Ordering::Relaxed);
                    ControlFlow::Break(Ok(()))
                }
                Ok(Gone::SwitchEnded) => {
                    self.state.switched.store(true, Ordering::Relaxed);
                    ControlFlow::Break(Ok(()))
                }
                Ok(Gone::Fatal(reason)) => {
                    tracing::error!(slot = %self.slot, "{reason}");
                    ControlFlow::Break(Err(Error::invalid("replication", reason)))
                }
                Err(e) => {
                    tracing::warn!(slot = %self.slot, error = %e.with_causes(), "could not read the schema's slot; trying again");
                    ControlFlow::Continue(None)
                }
            },
            NotStarted::NoSender(reason) => {
                tracing::warn!(slot = %self.slot, "{reason}; trying again");
                ControlFlow::Continue(None)
            }
            NotStarted::Refused(reason) => {
                tracing::error!(slot = %self.slot, "{reason}");
                ControlFlow::Break(Err(Error::invalid("replication", reason)))
            }
            NotStarted::Failed(error) | NotStarted::SlotBusy(error) => {
                tracing::warn!(slot = %self.slot, %error, "could not open the replication session; trying again");
                ControlFlow::Continue(None)
            }
        }
    }

    /// One session: reads, publishes and confirms until it ends.
    async fn stream(
        &mut self,
        mut client: ReplicationClient,
    ) -> std::result::Result<Ended, String> {
        let mut hand = InHand::default();
        loop {
            let flow = match self.received(&mut client, &mut hand).await? {
                Received::Stop => {
                    client.stop();
                    return Ok(Ended::Stopped);
                }
                Received::Idle => self.publish_to_switch(&mut client, &mut hand).await?,
                Received::Event(event) => self.take_in(&mut client, &mut hand, event).await?,
            };
            if let ControlFlow::Break(ended) = flow {
                return Ok(ended);
            }
        }
    }

    /// What the stream gives next. With a whole transaction or more in
    /// hand, publish as soon as nothing more is waiting ([`Received::Idle`]);
    /// otherwise wait for the stream, or for the relay to stop.
    async fn received(
        &mut self,
        client: &mut ReplicationClient,
        hand: &mut InHand,
    ) -> std::result::Result<Received, String> {
        if let Some(event) = hand.deferred.take() {
            return Ok(Received::Event(event));
        }
        if let Some(why) = hand.failed.take() {
            return Err(why);
        }
        let next = if hand.batch_end.is_some() {
            client.recv().now_or_never()
        } else {
            tokio::select! {
                r = client.recv() => Some(r),
                _ = self.shutdown.changed() => return Ok(Received::Stop),
            }
        };
        match next {
            None => Ok(Received::Idle),
            Some(Err(e)) => Err(e.to_string()),
            Some(Ok(None)) => Err("the server ended the replication stream".to_owned()),
            Some(Ok(Some(event))) => Ok(Received::Event(event)),
        }
    }

    /// One event of the stream taken into hand: a transaction begun, a
    /// message of this schema read, a transaction committed, or, with
    /// nothing of ours in hand, the slot let move.
    async fn take_in(
        &mut self,
        client: &mut ReplicationClient,
        hand: &mut InHand,
        event: ReplicationEvent,
    ) -> std::result::Result<ControlFlow<Ended>, String> {
        match event {
            ReplicationEvent::Begin { .. } => hand.begin(),
            ReplicationEvent::Message {
                prefix,
                transactional: false,
                ..
            } if prefix == self.incoming.prefix => {
                self.incoming.refuse(None, &Refusal::NotTransactional);
            }
            ReplicationEvent::Message {
                prefix, content, ..
            } if prefix == self.incoming.prefix => {
                return self.message(client, hand, &content).await
            }
            ReplicationEvent::Commit { end_lsn, .. } => {
                return self.committed(client, hand, end_lsn).await
            }
            // Nothing of ours is in hand: the slot may move to where the
            // server has decoded, so it holds no WAL for others.
            ReplicationEvent::KeepAlive { wal_end, .. } if hand.is_empty() => {
                client.update_applied_lsn(wal_end);
            }
            _ => {}
        }
        Ok(ControlFlow::Continue(()))
    }

    /// A message of this schema in the transaction being read: the
    /// switch's mark, a pause changed, or an event.
    async fn message(
        &mut self,
        client: &mut ReplicationClient,
        hand: &mut InHand,
        content: &[u8],
    ) -> std::result::Result<ControlFlow<Ended>, String> {
        if self
            .incoming
            .take_message(hand, content, self.config.batch_size)
        {
            if let ControlFlow::Break(ended) = self.publish(client, hand).await? {
                return Ok(ControlFlow::Break(ended));
            }
        }
        Ok(ControlFlow::Continue(()))
    }

    /// The end of the transaction being read: its events join the batch,
    /// which is published once full or once it reaches the switch's mark.
    async fn committed(
        &mut self,
        client: &mut ReplicationClient,
        hand: &mut InHand,
        end_lsn: Lsn,
    ) -> std::result::Result<ControlFlow<Ended>, String> {
        if std::mem::take(&mut hand.txn_pauses) {
            // A pause changed: what committed before it is published
            // first, what commits from here on under the pauses read again.
            if let ControlFlow::Break(ended) = self.publish(client, hand).await? {
                return Ok(ControlFlow::Break(ended));
            }
            self.pauses.forget();
        }
        hand.batch.append(&mut hand.txn);
        hand.batch_end = Some(end_lsn);
        if std::mem::take(&mut hand.txn_marks) {
            self.mark_committed(end_lsn).await?;
        }
        if hand.batch.len() >= self.config.batch_size || self.switch_reached(Some(end_lsn)) {
            return self.publish_to_switch(client, hand).await;
        }
        Ok(ControlFlow::Continue(()))
    }

    /// A mark committed (in the transaction ending at `end_lsn`): the
    /// switch's, if it is at the position the switch recorded (read now:
    /// the mark's transaction has committed).
    async fn mark_committed(&mut self, end_lsn: Lsn) -> std::result::Result<(), String> {
        self.switch_mark = match self.switch.mark().await {
            Ok(Mark::At(lsn)) => Some(lsn),
            Ok(Mark::Reached) => Some(end_lsn),
            Ok(Mark::None) => None,
            Err(e) => return Err(e.with_causes().to_string()),
        };
        if self.switch_mark.is_none() {
            tracing::warn!(slot = %self.slot, "ignoring a switch mark that no switch to the table mode is waiting for");
        }
        Ok(())
    }

    /// Publishes the batch in hand and confirms the slot past its end
    /// ([`Self::flush`]), leaving nothing in hand but the transaction
    /// being read; that end. Breaks with [`Ended::Stopped`] when the
    /// relay was told to stop first: nothing is confirmed.
    async fn publish(
        &mut self,
        client: &mut ReplicationClient,
        hand: &mut InHand,
    ) -> std::result::Result<ControlFlow<Ended, Option<Lsn>>, String> {
        let end = hand.batch_end.take();
        let batch = std::mem::take(&mut hand.batch);
        if !self.flush(client, hand, batch, end).await? {
            client.stop();
            return Ok(ControlFlow::Break(Ended::Stopped));
        }
        Ok(ControlFlow::Continue(end))
    }

    /// [`Self::publish`], then the session's end if the confirmation
    /// reached the pending switch's mark: the slot holds nothing more for
    /// this schema.
    async fn publish_to_switch(
        &mut self,
        client: &mut ReplicationClient,
        hand: &mut InHand,
    ) -> std::result::Result<ControlFlow<Ended>, String> {
        let end = match self.publish(client, hand).await? {
            ControlFlow::Continue(end) => end,
            ControlFlow::Break(ended) => return Ok(ControlFlow::Break(ended)),
        };
        if self.switch_reached(end) {
            let _ = client.shutdown().await;
            return Ok(ControlFlow::Break(Ended::Switched));
        }
        Ok(ControlFlow::Continue(()))
    }

    /// What a new session needs before it reads: the aggregates waiting
    /// in the table now (another relay may have set events aside since
    /// this one last read the slot), and the pending switch's mark. `true`
    /// when the slot is already confirmed past the mark: the switch ends
    /// without reading.
    async fn session_started(&mut self) -> Result<bool> {
        self.blocked = self.aside.aggregates_pending(&self.slot).await?;
        self.pauses.forget();
        self.switch_mark = match self.switch.mark().await? {
            Mark::Reached => return Ok(true),
            Mark::At(lsn) => Some(lsn),
            Mark::None => None,
        };
        Ok(false)
    }

    /// Whether confirming `end` reaches the pending switch's mark: every
    /// event emitted through the WAL mode is then behind it.
    fn switch_reached(&self, end: Option<Lsn>) -> bool {
        matches!((self.switch_mark, end), (Some(mark), Some(end)) if end >= mark)
    }
}
