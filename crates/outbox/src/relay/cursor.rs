//! The claim cursor: where in `seq` order a claim may start, so that its
//! cost does not grow with the dead rows left behind while something holds
//! back PostgreSQL's xmin (a long report, `pg_dump`, a replica's feedback).
//!
//! The claim reads fresh rows (never failed: `next_attempt_at IS NULL`)
//! from `seq >= at` only, and rows whose retry is due from anywhere (they
//! are few, found through their own index). The cursor only ever stands at
//! or below the lowest fresh pending row of the owned partitions; why no
//! row can be skipped for good:
//!
//! * **Late commits.** A row's transaction takes its transaction id before
//!   the row draws its `seq` (a statement trigger: migration 4's, or the
//!   wake-up trigger of migration 6). Claim *k*
//!   reads the sequence's last value *H*; the next claim takes its own
//!   transaction id *X* after claim *k* finished, so every transaction that
//!   drew a `seq ≤ H` has an id below *X* (ids are handed out in
//!   increasing order). Once a later claim sees `xmin ≥ X`, all of them
//!   have ended: every row with `seq ≤ H` is
//!   committed (and visible) or gone. Only then may the cursor pass them,
//!   and only up to the lowest fresh pending row that claim saw.
//! * **Rows pending below the cursor that are not due retries**: partitions
//!   taken over from another instance (the cursor restarts whenever the
//!   owned set changes; their rows were never below it for this instance).
//!   Dead letters put back by `outbox dead-letters retry` come back as
//!   retries due at once, which the claim reads from anywhere.
//!   Acknowledgements lost when PostgreSQL itself crashed bring their rows
//!   back below the cursor; rows changed or inserted by hand with an
//!   explicit `seq` are not supported. For all of these the worker looks
//!   behind the cursor every [`RESCAN_EVERY`] ([`Cursor::probe_due`]): one
//!   statement for the lowest fresh pending seq below it, run *beside* the
//!   claims (it walks the index from its start, over every dead entry left
//!   while xmin is held: 0.1–1 s per look after minutes of a held snapshot
//!   at 5,000 events/s, measured), and the cursor moves back to what it
//!   finds ([`Cursor::rewind`]). Such a row is claimed at most
//!   `RESCAN_EVERY` plus one look after it appeared.
//!
//! A transaction that wrote to the outbox and stays open holds the cursor
//! where it is (its rows may still commit); a read-only snapshot, however
//! old, does not.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// How often the worker looks for fresh pending rows behind the cursor.
pub(crate) const RESCAN_EVERY: Duration = Duration::from_secs(30);

/// Checkpoints kept while the oldest running writer holds `xmin` back;
/// beyond this the newest are dropped (the cursor then advances later, not
/// wrongly).
const MAX_CHECKPOINTS: usize = 1_024;

/// Where a claim starts, and what it needs to know to move the cursor on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Start {
    /// The lowest seq of fresh rows to read.
    pub from: i64,
    /// The transaction id the oldest checkpoint waits for: the claim's
    /// xmin only needs the costlier, per-database reading when the
    /// snapshot's own is below it (`i64::MIN`: nothing to wait for).
    pub waiting_for: i64,
}

/// What a claim statement saw, besides its rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ClaimMeta {
    /// `xmin` of the claim's snapshot: every transaction id below it ended.
    pub xmin: i64,
    /// The claim's own transaction id, assigned while it ran: every id
    /// assigned before the claim is below. (Not the snapshot's `xmax`,
    /// which only bounds the ids that have *ended*: a writer still running
    /// can hold an id at or above it.)
    pub xid: i64,
    /// The last `seq` drawn so far (`None` before the first).
    pub seq_high: Option<i64>,
    /// The lowest fresh pending `seq >= cursor` in the claimed partitions.
    pub lowest_fresh: Option<i64>,
}

/// The cursor of one worker.
#[derive(Debug)]
pub(crate) struct Cursor {
    at: i64,
    partitions: Vec<i32>,
    /// `(seq_high of claim k, own id of claim k + 1)`, oldest first.
    checkpoints: VecDeque<(i64, Option<i64>)>,
    /// When the cursor last started over or began a look behind itself.
    last_look: Option<Instant>,
}

/// A look behind the cursor: the lowest fresh pending seq of `partitions`
/// below `below`, read by the worker beside its claims.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Probe {
    pub partitions: Vec<i32>,
    pub below: i64,
}

impl Cursor {
    pub fn new() -> Self {
        Cursor {
            at: 0,
            partitions: Vec::new(),
            checkpoints: VecDeque::new(),
            last_look: None,
        }
    }

    /// Where a claim of `partitions` starts now. Starts over (0) when the
    /// partitions changed (rows of partitions taken over can lie anywhere).
    pub fn start(&mut self, partitions: &[i32], now: Instant) -> i64 {
        if partitions != self.partitions.as_slice() {
            self.at = 0;
            self.partitions = partitions.to_vec();
            self.last_look = Some(now);
        }
        self.at
    }

    /// The look behind the cursor to start now, if one is due: every
    /// [`RESCAN_EVERY`] after the last start-over or look, while the cursor
    /// stands above 0. At most one is asked for per period; the caller runs
    /// it beside the claims and hands back what it found to
    /// [`Cursor::rewind`].
    pub fn probe_due(&mut self, now: Instant) -> Option<Probe> {
        let due = self
            .last_look
            .is_none_or(|at| now.duration_since(at) >= RESCAN_EVERY);
        if !due || self.at == 0 {
            return None;
        }
        self.last_look = Some(now);
        Some(Probe {
            partitions: self.partitions.clone(),
            below: self.at,
        })
    }

    /// Moves the cursor back to `lowest`, a fresh pending seq that `probe`
    /// found below it. Going back never skips a row, it only reads more;
    /// a look at other partitions than today's teaches nothing (the
    /// cursor started over since).
    pub fn rewind(&mut self, probe: &Probe, lowest: i64) {
        if probe.partitions == self.partitions && lowest < self.at {
            self.at = lowest;
        }
    }

    /// [`Cursor::start`] with what the claim needs to know besides.
    pub fn start_claim(&mut self, partitions: &[i32], now: Instant) -> Start {
        let from = self.start(partitions, now);
        let waiting_for = match self.checkpoints.front() {
            Some(&(_, Some(xid))) => xid,
            _ => i64::MIN,
        };
        Start { from, waiting_for }
    }

    /// Learns from a claim of `partitions` that started at `from`.
    pub fn observe(&mut self, partitions: &[i32], from: i64, meta: ClaimMeta) {
        if let Some(last) = self.checkpoints.back_mut() {
            last.1.get_or_insert(meta.xid);
        }
        let mut stable = None;
        while let Some(&(high, Some(xid))) = self.checkpoints.front() {
            if xid > meta.xmin {
                break;
            }
            stable = Some(high);
            self.checkpoints.pop_front();
        }
        if let Some(high) = meta.seq_high {
            if self.checkpoints.len() < MAX_CHECKPOINTS {
                self.checkpoints.push_back((high, None));
            }
        }
        let same_range = from == self.at && partitions == self.partitions.as_slice();
        if let (Some(stable), true) = (stable, same_range) {
            let bound = match meta.lowest_fresh {
                Some(fresh) => fresh.min(stable + 1),
                None => stable + 1,
            };
            self.at = self.at.max(bound);
        }
    }

    #[cfg(test)]
    fn at(&self) -> i64 {
        self.at
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const P: &[i32] = &[0, 1];

    fn meta(xmin: i64, xid: i64, seq_high: i64, lowest_fresh: Option<i64>) -> ClaimMeta {
        ClaimMeta {
            xmin,
            xid,
            seq_high: Some(seq_high),
            lowest_fresh,
        }
    }

    #[test]
    fn the_cursor_waits_until_every_writer_that_drew_a_seq_has_ended() {
        let now = Instant::now();
        let mut c = Cursor::new();
        let from = c.start(P, now);
        assert_eq!(from, 0);
        // claim 1: seqs up to 100 drawn; nothing stable yet
        c.observe(P, from, meta(500, 510, 100, Some(90)));
        assert_eq!(c.at(), 0);
        // claim 2: its id 520 pairs with seq_high 100, but a writer below 520
        // is still running (xmin 515): not stable
        let from = c.start(P, now);
        c.observe(P, from, meta(515, 520, 150, Some(95)));
        assert_eq!(c.at(), 0);
        // claim 3: xmin passed 520: every seq <= 100 is final; the lowest
        // fresh pending row is 97
        let from = c.start(P, now);
        c.observe(P, from, meta(521, 530, 200, Some(97)));
        assert_eq!(c.at(), 97);
    }

    /// Three claims of `parts` from the cursor, each seeing every earlier
    /// writer ended and `seq_high` drawn: the cursor becomes `seq_high + 1`
    /// (or the lowest fresh row).
    fn settle(c: &mut Cursor, parts: &[i32], now: Instant, seq_high: i64, xid: &mut i64) {
        for _ in 0..3 {
            let from = c.start(parts, now);
            c.observe(parts, from, meta(*xid, *xid + 1, seq_high, None));
            *xid += 2;
        }
    }

    /// A cursor over [`P`] settled past seq 100, the time it was made, and
    /// the next free transaction id.
    fn settled_past_100() -> (Cursor, Instant, i64) {
        let (now, mut xid) = (Instant::now(), 10);
        let mut c = Cursor::new();
        settle(&mut c, P, now, 100, &mut xid);
        (c, now, xid)
    }

    #[test]
    fn the_cursor_never_passes_the_stable_bound_or_goes_back() {
        let now = Instant::now();
        let mut c = Cursor::new();
        c.start(P, now);
        c.observe(P, 0, meta(10, 11, 100, None));
        c.observe(P, 0, meta(12, 13, 200, None));
        c.observe(P, 0, meta(14, 15, 300, None));
        // only seq_high 100 is stable (its pairing id 13 <= xmin 14)
        assert_eq!(c.at(), 101);
        // 200 becomes stable; the lowest fresh row 150 is below 201
        c.observe(P, 101, meta(16, 17, 300, Some(150)));
        assert_eq!(c.at(), 150);
        // a claim that saw a lower fresh row cannot move it back
        c.observe(P, 150, meta(18, 19, 300, Some(120)));
        assert_eq!(c.at(), 150);
    }

    #[test]
    fn new_partitions_start_over_and_time_alone_does_not() {
        let (mut c, now, mut xid) = settled_past_100();
        assert_eq!(c.start(P, now), 101);
        assert_eq!(c.start(&[0, 1, 2], now), 0, "a partition was added");
        settle(&mut c, &[0, 1, 2], now, 100, &mut xid);
        assert_eq!(c.start(&[0, 1, 2], now), 101);
        assert_eq!(
            c.start(&[0, 1, 2], now + RESCAN_EVERY),
            101,
            "time alone never makes a claim start over"
        );
    }

    #[test]
    fn a_look_behind_is_due_once_per_period_and_a_find_moves_the_cursor_back() {
        let now = Instant::now();
        let mut xid = 10;
        let mut c = Cursor::new();
        assert_eq!(c.probe_due(now + RESCAN_EVERY), None, "nothing behind 0");
        settle(&mut c, P, now, 100, &mut xid);
        assert_eq!(c.probe_due(now), None, "the start-over was the look");
        let probe = c.probe_due(now + RESCAN_EVERY).expect("a look is due");
        assert_eq!(
            probe,
            Probe {
                partitions: P.to_vec(),
                below: 101
            }
        );
        assert_eq!(c.probe_due(now + RESCAN_EVERY), None, "one per period");
        c.rewind(&probe, 40);
        assert_eq!(c.start(P, now + RESCAN_EVERY), 40);
        c.rewind(&probe, 70);
        assert_eq!(c.at(), 40, "a rewind never moves the cursor forward");
        // the cursor moves on from there as before
        settle(&mut c, P, now, 200, &mut xid);
        assert_eq!(c.at(), 201);
    }

    #[test]
    fn a_look_at_partitions_no_longer_owned_teaches_nothing() {
        let (mut c, now, mut xid) = settled_past_100();
        let probe = c.probe_due(now + RESCAN_EVERY).expect("a look is due");
        c.start(&[0, 1, 2], now + RESCAN_EVERY);
        settle(&mut c, &[0, 1, 2], now, 100, &mut xid);
        c.rewind(&probe, 5);
        assert_eq!(c.at(), 101);
    }

    #[test]
    fn a_claim_from_another_range_teaches_nothing() {
        let now = Instant::now();
        let mut c = Cursor::new();
        c.start(P, now);
        c.observe(P, 0, meta(10, 11, 100, None));
        c.observe(P, 0, meta(12, 13, 100, None));
        // this claim ran over other partitions (ownership changed meanwhile)
        c.observe(&[5], 0, meta(14, 15, 100, None));
        assert_eq!(c.at(), 0);
        // and one from a stale start teaches nothing either
        c.observe(P, 7, meta(16, 17, 100, None));
        assert_eq!(c.at(), 0);
    }

    #[test]
    fn a_claim_asks_for_the_per_database_xmin_only_while_a_checkpoint_waits() {
        let now = Instant::now();
        let mut c = Cursor::new();
        // nothing drawn yet: nothing to wait for
        assert_eq!(c.start_claim(P, now).waiting_for, i64::MIN);
        // seq_high 100 drawn; its checkpoint is paired by the next claim's id
        c.observe(P, 0, meta(10, 11, 100, None));
        assert_eq!(c.start_claim(P, now).waiting_for, i64::MIN);
        c.observe(P, 0, meta(10, 12, 200, None));
        let start = c.start_claim(P, now);
        assert_eq!((start.from, start.waiting_for), (0, 12));
        // once xmin passes 12 the checkpoint is gone; the next waits for 13
        c.observe(P, 0, meta(12, 13, 300, None));
        assert_eq!(c.start_claim(P, now).waiting_for, 13);
    }
}
