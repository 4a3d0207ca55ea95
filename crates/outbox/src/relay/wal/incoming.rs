//! Each message of this schema into an event: decoded, checked as the
//! table would check its row ([`super::check`]), numbered in stream
//! order; or refused: logged, counted, never published.

use std::sync::Arc;

use super::check::{Admission, Refusal};
use super::hand::InHand;
use super::switch::SWITCH_TO_TABLE;
use crate::event::Event;
use crate::relay::observe::{RelayObserver, RelayStats};
use crate::wal::{message, PAUSES_CHANGED};

pub(crate) struct Incoming {
    /// The prefix of this schema's messages.
    pub prefix: String,
    /// The check of each message, the ids read since the last
    /// confirmation, and the events dead on arrival.
    pub admission: Admission,
    /// Stream order of the events read, for the lanes and the table's seq.
    pub next_seq: i64,
    pub stats: Arc<RelayStats>,
    pub observer: Option<Arc<dyn RelayObserver>>,
}

impl Incoming {
    /// The event a message of this schema carries. A message no row could
    /// hold is refused. One a row can hold but that must not be published
    /// (headers not an object, a `created_at` no server wrote) comes back
    /// noted dead on arrival, and its batch sets it aside as a dead letter.
    pub(crate) fn decoded(&mut self, content: &[u8]) -> Option<Event> {
        let text = match std::str::from_utf8(content) {
            Ok(text) => text,
            Err(e) => {
                self.refuse(None, &Refusal::NotUtf8(e.to_string()));
                return None;
            }
        };
        let m = match message::decode(text) {
            Ok(m) => m,
            Err(e) => {
                self.refuse(None, &Refusal::Malformed(e.to_string()));
                return None;
            }
        };
        let checked = match self.admission.admit(&m, content, self.next_seq + 1) {
            Ok(checked) => checked,
            Err(refusal) => {
                self.refuse(Some(m.id), &refusal);
                return None;
            }
        };
        self.next_seq += 1;
        if let Some(why) = checked.dead {
            self.admission.dead_on_arrival(self.next_seq, why);
        }
        Some(Event {
            id: m.id,
            seq: self.next_seq,
            aggregate_type: m.aggregate_type.to_owned(),
            aggregate_id: m.aggregate_id.to_owned(),
            event_type: m.event_type.to_owned(),
            payload: m.payload.to_owned(),
            headers: checked.headers,
            topic: m.topic.map(str::to_owned),
            attempts: 0,
            created_at: checked.created_at.unwrap_or_else(chrono::Utc::now),
            partition: 0,
        })
    }

    /// A message of this schema in the transaction being read, taken into
    /// `hand`: the switch's mark, a pause changed, or an event. `true` when
    /// the batch in hand is then full: a transaction larger than a batch
    /// is published in batches as it streams (it has committed: pgoutput
    /// sends only committed transactions), and the slot moves past it at
    /// its end.
    pub(crate) fn take_message(
        &mut self,
        hand: &mut InHand,
        content: &[u8],
        batch_size: usize,
    ) -> bool {
        if content == SWITCH_TO_TABLE.as_bytes() {
            hand.txn_marks = true;
        } else if content == PAUSES_CHANGED.as_bytes() {
            hand.txn_pauses = true;
        } else if let Some(e) = self.decoded(content) {
            hand.txn.push(e);
        }
        if hand.batch.len() + hand.txn.len() < batch_size {
            return false;
        }
        hand.batch.append(&mut hand.txn);
        true
    }

    /// Logs and counts a refused message.
    pub(crate) fn refuse(&self, id: Option<uuid::Uuid>, refusal: &Refusal) {
        self.stats.add_refused_message();
        if let Some(o) = &self.observer {
            o.on_refused_message(refusal.rule());
        }
        let event_id = id
            .map(|id| id.to_string())
            .unwrap_or_else(|| "unreadable".to_owned());
        tracing::error!(prefix = %self.prefix, %event_id, rule = refusal.rule(), "refused a message, never published: {refusal}; {}", refusal.fix());
    }
}
