//! Which ids the reader has read since the slot was last confirmed, and
//! which events it read are dead on arrival.

use std::collections::HashMap;
use std::hash::BuildHasher;

use chrono::Utc;
use uuid::Uuid;

use super::{check, Checked, Refusal, CREATED_AT_AHEAD_MICROS};
use crate::event::Event;
use crate::wal::message::Emitted;

/// The ids read since the slot was last confirmed, each with a hash of
/// the message that carried it: the same id in a message with other
/// contents is a second event under one id, refused as the table refuses
/// a second row ([`Refusal::DuplicateId`]); the same message read again
/// (a session opened again from the confirmed position) is admitted. A
/// confirmation forgets the ids of the batches published before it, not
/// those of a transaction still being read. A transaction larger than a
/// batch is confirmed only at its end, so this holds all of its ids until
/// then (about 40 bytes each). An id reused after a confirmation is not
/// caught: docs/producers.md.
#[derive(Debug, Default)]
pub(crate) struct Admission {
    /// Each id's message hash and the `seq` it was last read under.
    seen: HashMap<Uuid, (u64, i64), foldhash::quality::RandomState>,
    /// Keyed per process: a forger cannot aim at a collision.
    hasher: foldhash::quality::RandomState,
    /// The latest `created_at` admitted, from the relay's clock, read
    /// again only when a message is past it.
    not_after_micros: i64,
    /// Events dead on arrival, by their `seq`, until their batch is
    /// settled.
    dead: Vec<(i64, String)>,
    /// The last `seq` of the batches handed to [`Admission::dead_among`]:
    /// what the next confirmation covers.
    published_through: i64,
}

impl Admission {
    /// Checks `m`, carried by `content`, and notes its id, for the event
    /// `seq` it becomes if admitted.
    pub(crate) fn admit(
        &mut self,
        m: &Emitted<'_>,
        content: &[u8],
        seq: i64,
    ) -> Result<Checked, Refusal> {
        if m.created_at_micros > self.not_after_micros {
            self.not_after_micros = Utc::now().timestamp_micros() + CREATED_AT_AHEAD_MICROS;
        }
        let checked = check(m, self.not_after_micros)?;
        let hash = self.hasher.hash_one(content);
        let seen = self.seen.entry(m.id).or_insert((hash, seq));
        if seen.0 != hash {
            return Err(Refusal::DuplicateId);
        }
        seen.1 = seq;
        Ok(checked)
    }

    /// Notes that event `seq` is dead on arrival, for `why`.
    pub(crate) fn dead_on_arrival(&mut self, seq: i64, why: String) {
        self.dead.push((seq, why));
    }

    /// Takes the events of `batch` (in stream order) that are dead on
    /// arrival out of it, each with why. Notes older than the batch's
    /// last event are dropped with it: their event was read in a session
    /// that ended, and is read again under a new seq.
    pub(crate) fn dead_among(&mut self, batch: Vec<Event>) -> (Vec<Event>, Vec<(Event, String)>) {
        let Some(last) = batch.last().map(|e| e.seq) else {
            return (batch, Vec::new());
        };
        self.published_through = last;
        let upto = self.dead.partition_point(|(seq, _)| *seq <= last);
        if upto == 0 {
            return (batch, Vec::new());
        }
        let mut notes: HashMap<i64, String> = self.dead.drain(..upto).collect();
        let mut live = Vec::with_capacity(batch.len());
        let mut dead = Vec::new();
        for e in batch {
            match notes.remove(&e.seq) {
                Some(why) => dead.push((e, why)),
                None => live.push(e),
            }
        }
        (live, dead)
    }

    /// As [`Admission::confirmed`] after a batch ending at `seq` was
    /// published, without the batch.
    #[cfg(test)]
    pub(super) fn confirmed_through(&mut self, seq: i64) {
        self.published_through = seq;
        self.confirmed();
    }

    /// The slot is confirmed past every batch published so far: their
    /// messages cannot be read again.
    pub(crate) fn confirmed(&mut self) {
        let through = self.published_through;
        self.seen.retain(|_, (_, seq)| *seq > through);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wal::message::decode;

    const ID: &str = "0190f3c2-7a4b-7c3d-8e9f-0123456789ab";
    /// 2024-12-06T19:12:25Z.
    const NOW: i64 = 1_733_512_345_123_456;

    #[test]
    fn a_second_message_with_one_id_is_refused_until_the_slot_is_confirmed_and_a_reread_passes() {
        let mut a = Admission::default();
        let first = format!("{ID} {NOW} 5 order2 427 created- 2 {{}}{{\"n\": 1}}");
        let other = format!("{ID} {NOW} 5 order2 427 created- 2 {{}}{{\"n\": 2}}");
        let m1 = decode(&first).unwrap();
        let m2 = decode(&other).unwrap();
        assert!(a.admit(&m1, first.as_bytes(), 1).is_ok());
        assert!(a.admit(&m1, first.as_bytes(), 2).is_ok(), "read again");
        assert_eq!(a.admit(&m2, other.as_bytes(), 3), Err(Refusal::DuplicateId));
        assert!(a.admit(&m1, first.as_bytes(), 3).is_ok(), "the first stays");
        // A confirmation before the batch holding it was published (its
        // transaction still being read) keeps the id...
        let _ = a.dead_among(vec![crate::event::test_event(2, "x")]);
        a.confirmed();
        assert_eq!(a.admit(&m2, other.as_bytes(), 4), Err(Refusal::DuplicateId));
        // ...one after forgets it (the documented limit).
        let _ = a.dead_among(vec![crate::event::test_event(3, "x")]);
        a.confirmed();
        assert!(a.admit(&m2, other.as_bytes(), 5).is_ok());
        // A refused message does not take the id.
        let mut a = Admission::default();
        let long = format!("{ID} {NOW} 101 {}2 427 created- 2 {{}}1", "x".repeat(101));
        let m = decode(&long).unwrap();
        assert!(matches!(
            a.admit(&m, long.as_bytes(), 1),
            Err(Refusal::TooLong { .. })
        ));
        assert!(a.admit(&m2, other.as_bytes(), 1).is_ok());
    }

    #[test]
    fn dead_events_are_taken_out_of_their_batch_and_stale_notes_dropped() {
        use crate::event::test_event as ev;
        let mut a = Admission::default();
        a.dead_on_arrival(1, "stale".into());
        a.dead_on_arrival(4, "four".into());
        a.dead_on_arrival(9, "later".into());
        let batch = vec![ev(3, "a"), ev(4, "a"), ev(5, "a")];
        let (live, dead) = a.dead_among(batch);
        assert_eq!(live.iter().map(|e| e.seq).collect::<Vec<_>>(), [3, 5]);
        let dead: Vec<(i64, &str)> = dead.iter().map(|(e, w)| (e.seq, w.as_str())).collect();
        assert_eq!(dead, [(4, "four")]);
        assert_eq!(a.dead, [(9, "later".to_owned())]);
        let (live, dead) = a.dead_among(vec![ev(6, "b")]);
        assert_eq!((live.len(), dead.len()), (1, 0));
    }
}
