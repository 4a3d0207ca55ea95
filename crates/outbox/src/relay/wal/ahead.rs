//! Reading ahead while a batch is in flight, as the table mode claims
//! ahead (`relay/worker/ahead.rs`): while the delivery core waits for a
//! batch's last calls, the stream is read on, and what is read joins the
//! lanes ([`crate::relay::deliver::Core::deliver_joined`]) as soon as a
//! whole transaction or more is in hand with nothing more waiting, up to
//! [`JOINED_MAX`] full batches' worth of events published as one: a slow
//! call then holds only its aggregate, not what was read after it. (A
//! stream's batches end where the stream pauses, not at `batch_size`
//! only, so they are counted by their events.) The slot is confirmed
//! past what joined only once all of it is settled (never past an event
//! not delivered or set aside), and nothing read ahead moves the slot.
//!
//! A batch joins only if nothing of it must wait in the table (an
//! aggregate with an event set aside, a paused type); otherwise it stays
//! in hand and the session publishes it after the batch in flight. What
//! only the session may do (a pause changed, the switch's mark, the
//! stream failing) ends the reading ahead and is left in hand for it.

use std::collections::HashSet;
use std::future::Future;
use std::pin::Pin;

use futures::FutureExt;
use pgwire_replication::{Lsn, ReplicationClient, ReplicationEvent};
use uuid::Uuid;

use super::check::Refusal;
use super::hand::InHand;
use super::incoming::Incoming;
use crate::event::Event;
use crate::relay::deliver::pauses::Pauses;
use crate::relay::deliver::JOINED_MAX;

/// The stream read on while a batch is in flight.
pub(crate) struct ReadAhead<'a> {
    pub client: &'a mut ReplicationClient,
    pub hand: &'a mut InHand,
    pub incoming: &'a mut Incoming,
    /// Aggregates with an event waiting in the table.
    pub blocked: &'a HashSet<String>,
    /// The pauses the batch in flight was checked against (a pause that
    /// changes ends the reading ahead).
    pub pauses: &'a Pauses,
    pub batch_size: usize,
    /// Events read into what is published as one so far, the batch in
    /// flight included.
    pub read: usize,
}

/// A batch read ahead, joining the one in flight.
#[derive(Debug)]
pub(crate) struct Joined {
    /// Its events to publish, in stream order (taken by the lanes).
    pub events: Vec<Event>,
    /// Its events dead on arrival, each with why: set aside, never sent.
    pub dead: Vec<(Event, String)>,
    /// The end of its last whole transaction (`None` for a batch cut out
    /// of a transaction still streaming).
    pub end: Option<Lsn>,
    /// How many events it read, for its report.
    pub claimed: usize,
    /// Its events' ids, for its report.
    pub ids: HashSet<Uuid>,
}

/// What reading ahead came to.
pub(crate) enum Read<'a> {
    /// A batch joins; reading ahead goes on with the second part while
    /// fewer than [`JOINED_MAX`] full batches' worth of events are read.
    Joins(Joined, Option<ReadAhead<'a>>),
    /// Reading ahead ended; what it read is in hand.
    Ends,
}

/// Reading ahead, as the delivery core awaits it.
pub(crate) type Reading<'a> = Pin<Box<dyn Future<Output = Read<'a>> + Send + 'a>>;

impl<'a> ReadAhead<'a> {
    pub(crate) fn start(self) -> Reading<'a> {
        Box::pin(self.read())
    }

    /// Reads until a batch can join (a full one, or a whole transaction
    /// or more of events in hand with nothing more waiting), or until
    /// something only the session may take in. Dropped when the batch in flight is
    /// done first: what was read is in hand, and the stream's receiver
    /// loses nothing to a drop.
    async fn read(self) -> Read<'a> {
        let mut this = self;
        loop {
            let next = if this.hand.batch_end.is_some() && !this.hand.batch.is_empty() {
                match this.client.recv().now_or_never() {
                    Some(next) => next,
                    None => return this.join(),
                }
            } else {
                this.client.recv().await
            };
            let event = match next {
                Ok(Some(event)) => event,
                Ok(None) => {
                    this.hand.failed = Some("the server ended the replication stream".to_owned());
                    return Read::Ends;
                }
                Err(e) => {
                    this.hand.failed = Some(e.to_string());
                    return Read::Ends;
                }
            };
            if this.take_in(event) {
                return this.join();
            }
            if this.hand.deferred.is_some() {
                return Read::Ends;
            }
        }
    }

    /// Takes one event of the stream into hand as the session would;
    /// `true` when the batch in hand is full. The commit of a transaction
    /// that changed a pause or carries a switch mark is left to the
    /// session ([`InHand::deferred`]); a keepalive is not acted on (the
    /// slot moves only once the batch in flight is settled).
    fn take_in(&mut self, event: ReplicationEvent) -> bool {
        let hand = &mut *self.hand;
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
                return self.incoming.take_message(hand, &content, self.batch_size);
            }
            ReplicationEvent::Commit { end_lsn, .. } if !(hand.txn_pauses || hand.txn_marks) => {
                hand.batch.append(&mut hand.txn);
                hand.batch_end = Some(end_lsn);
                return hand.batch.len() >= self.batch_size;
            }
            commit @ ReplicationEvent::Commit { .. } => hand.deferred = Some(commit),
            _ => {}
        }
        false
    }

    /// The batch in hand joins the one in flight, unless one of its
    /// events must wait in the table: it then stays in hand, and reading
    /// ahead ends.
    fn join(mut self) -> Read<'a> {
        let held = self
            .hand
            .batch
            .iter()
            .any(|e| self.blocked.contains(&e.aggregate_id) || self.pauses.hold(e));
        if held {
            return Read::Ends;
        }
        let events = std::mem::take(&mut self.hand.batch);
        let end = self.hand.batch_end.take();
        let claimed = events.len();
        let ids = events.iter().map(|e| e.id).collect();
        let (events, dead) = self.incoming.admission.dead_among(events);
        self.read += claimed;
        let more = (self.read < JOINED_MAX * self.batch_size).then_some(self);
        Read::Joins(
            Joined {
                events,
                dead,
                end,
                claimed,
                ids,
            },
            more,
        )
    }
}
