//! Lanes: how a batch is published without ever letting an event overtake
//! an earlier event of its aggregate, and without waiting for a whole
//! round of them. Each aggregate is a lane holding its events in order;
//! only a lane's first event is ready, and its next one becomes ready as
//! soon as that one is delivered. A lane whose event was not delivered
//! (failed, not sent, held) stops: the rest of it is left over, for the
//! source to keep (rows stay pending; the WAL reader sets them aside or
//! sends them again).
//!
//! A later batch can join while the lanes still have events in flight
//! ([`Lanes::extend`]): each of its events goes to the back of its
//! aggregate's lane, so it waits for that aggregate's earlier events, and
//! never follows one that was not delivered.
//!
//! Pure: no I/O, no clock. The core ([`super::Core::deliver`]) takes ready
//! events, publishes them, and tells the lanes which were delivered.

use std::collections::{BTreeMap, HashMap, VecDeque};

use crate::event::Event;

/// A batch's events by aggregate, and which are ready to be sent.
#[derive(Debug, Default)]
pub(crate) struct Lanes {
    /// Each lane's events not yet taken, in order.
    lanes: Vec<VecDeque<Event>>,
    /// The lane of each aggregate.
    by_aggregate: HashMap<String, usize>,
    /// The lanes whose first event is ready, by that event's `seq`: taken
    /// in stream order.
    ready: BTreeMap<i64, usize>,
    /// Lanes with an event taken and not (yet) delivered: in flight, or
    /// stopped. Nothing of theirs is ready.
    waiting: Vec<bool>,
}

impl Lanes {
    /// The lanes of `batch` (in `seq` order): every aggregate's first event
    /// is ready.
    pub(crate) fn new(batch: Vec<Event>) -> Self {
        let mut l = Lanes::default();
        l.extend(batch);
        l
    }

    /// Adds `batch` (in `seq` order, every event later than those already
    /// here of its aggregate) behind what is here: an event is ready if
    /// its lane was empty and not waiting.
    pub(crate) fn extend(&mut self, batch: Vec<Event>) {
        for e in batch {
            let lane = match self.by_aggregate.get(&e.aggregate_id) {
                Some(&lane) => lane,
                None => {
                    let lane = self.lanes.len();
                    self.by_aggregate.insert(e.aggregate_id.clone(), lane);
                    // Most lanes of a batch hold one event: room for
                    // one, grown if a second comes.
                    self.lanes.push(VecDeque::with_capacity(1));
                    self.waiting.push(false);
                    lane
                }
            };
            if self.lanes[lane].is_empty() && !self.waiting[lane] {
                self.ready.insert(e.seq, lane);
            }
            self.lanes[lane].push_back(e);
        }
    }

    /// Takes up to `n` ready events, in stream order; no two of one
    /// aggregate, none of an aggregate with an event taken and not yet
    /// [`Lanes::delivered`].
    pub(crate) fn take(&mut self, n: usize) -> Vec<Event> {
        let mut out = Vec::new();
        while out.len() < n {
            let Some((_, lane)) = self.ready.pop_first() else {
                break;
            };
            if let Some(e) = self.lanes[lane].pop_front() {
                self.waiting[lane] = true;
                out.push(e);
            }
        }
        out
    }

    /// `event` (taken earlier) was delivered: its aggregate's next event,
    /// if any, is ready.
    pub(crate) fn delivered(&mut self, event: &Event) {
        if let Some(&lane) = self.by_aggregate.get(&event.aggregate_id) {
            self.waiting[lane] = false;
            if let Some(next) = self.lanes[lane].front() {
                self.ready.insert(next.seq, lane);
            }
        }
    }

    /// Whether an event is ready now.
    pub(crate) fn any_ready(&self) -> bool {
        !self.ready.is_empty()
    }

    /// Every event not taken, in `seq` order: the lanes that stopped, and
    /// the ready events never sent.
    pub(crate) fn left_over(self) -> Vec<Event> {
        let mut out: Vec<Event> = self.lanes.into_iter().flatten().collect();
        out.sort_by_key(|e| e.seq);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::test_event as ev;

    fn seqs(events: &[Event]) -> Vec<i64> {
        events.iter().map(|e| e.seq).collect()
    }

    #[test]
    fn only_each_aggregates_first_event_is_ready_and_the_next_follows_its_delivery() {
        let mut l = Lanes::new(vec![
            ev(1, "a"),
            ev(2, "b"),
            ev(3, "a"),
            ev(4, "a"),
            ev(5, "c"),
            ev(6, "b"),
        ]);
        let first = l.take(usize::MAX);
        assert_eq!(seqs(&first), [1, 2, 5], "one per aggregate, in order");
        assert!(
            l.take(usize::MAX).is_empty(),
            "nothing else until delivered"
        );
        // b's first delivered: b's next is ready at once, a's is not.
        l.delivered(&first[1]);
        let next = l.take(usize::MAX);
        assert_eq!(seqs(&next), [6]);
        l.delivered(&first[0]);
        assert_eq!(seqs(&l.take(1)), [3]);
        assert!(!l.any_ready());
        assert_eq!(seqs(&l.left_over()), [4], "a's last waits behind 3");
    }

    #[test]
    fn a_lane_whose_event_is_not_delivered_stops_and_the_rest_is_left_over_in_order() {
        let mut l = Lanes::new(vec![ev(1, "a"), ev(2, "b"), ev(3, "a"), ev(4, "b")]);
        let taken = l.take(usize::MAX);
        l.delivered(&taken[1]); // b delivered, a failed
        assert_eq!(seqs(&l.take(usize::MAX)), [4]);
        assert_eq!(seqs(&l.left_over()), [3]);
    }

    #[test]
    fn ready_events_are_taken_in_stream_order_a_few_at_a_time() {
        let mut l = Lanes::new(vec![ev(3, "c"), ev(5, "a"), ev(8, "b"), ev(9, "c")]);
        assert_eq!(seqs(&l.take(2)), [3, 5]);
        assert_eq!(seqs(&l.take(2)), [8]);
        let mut never = Lanes::new(vec![ev(1, "a"), ev(2, "b")]);
        assert_eq!(seqs(&never.take(1)), [1]);
        assert_eq!(seqs(&never.left_over()), [2], "a ready event never sent");
    }

    #[test]
    fn a_later_batch_waits_behind_its_aggregates_events_in_flight_and_never_follows_a_failed_one() {
        let mut l = Lanes::new(vec![ev(1, "a"), ev(2, "b"), ev(3, "c")]);
        let first = l.take(usize::MAX);
        l.delivered(&first[2]); // c delivered; a in flight; b failed
        l.extend(vec![ev(4, "b"), ev(5, "a"), ev(6, "c"), ev(7, "d")]);
        assert_eq!(seqs(&l.take(usize::MAX)), [6, 7], "c and d are free");
        assert!(!l.any_ready());
        l.delivered(&first[0]);
        assert_eq!(
            seqs(&l.take(usize::MAX)),
            [5],
            "a's next once a's first is delivered"
        );
        assert_eq!(seqs(&l.left_over()), [4], "b's stays behind its failure");
    }

    proptest::proptest! {
        /// A second batch joining at any moment, with events in flight and
        /// answered in any order: no event is taken while an earlier event
        /// of its aggregate is in flight or was not delivered, and every
        /// event is taken once or left over once.
        #[test]
        fn a_batch_joining_in_flight_overtakes_nothing_and_loses_nothing(
            aggs in proptest::collection::vec(0u8..4, 0..40),
            split in 0usize..40,
            join_at in 0usize..40,
            fails in proptest::collection::vec(proptest::bool::weighted(0.2), 40),
            answer in proptest::collection::vec(0usize..8, 80),
            n in 1usize..4,
        ) {
            let events: Vec<Event> = aggs
                .iter()
                .enumerate()
                .map(|(i, a)| ev(i as i64 + 1, &format!("agg{a}")))
                .collect();
            let total = events.len();
            let split = split.min(total);
            let mut second = Some(events[split..].to_vec());
            let mut l = Lanes::new(events[..split].to_vec());
            let mut in_flight: Vec<Event> = Vec::new();
            let mut delivered: HashMap<String, i64> = HashMap::new();
            let mut stopped: std::collections::HashSet<String> = Default::default();
            let (mut taken, mut step) = (0, 0);
            loop {
                if step == join_at {
                    if let Some(b) = second.take() {
                        l.extend(b);
                    }
                }
                for e in l.take(n) {
                    taken += 1;
                    let agg = &e.aggregate_id;
                    proptest::prop_assert!(!stopped.contains(agg), "after a failure");
                    proptest::prop_assert!(!in_flight.iter().any(|f| &f.aggregate_id == agg));
                    proptest::prop_assert!(e.seq > delivered.get(agg).copied().unwrap_or(0));
                    in_flight.push(e);
                }
                if in_flight.is_empty() {
                    match second.take() {
                        Some(b) => l.extend(b),
                        None if !l.any_ready() => break,
                        None => {}
                    }
                    step += 1;
                    continue;
                }
                let e = in_flight.remove(answer[step % 80] % in_flight.len());
                if fails[e.seq as usize % 40] {
                    stopped.insert(e.aggregate_id.clone());
                } else {
                    delivered.insert(e.aggregate_id.clone(), e.seq);
                    l.delivered(&e);
                }
                step += 1;
            }
            let left = l.left_over();
            proptest::prop_assert_eq!(taken + left.len(), total);
            for e in &left {
                proptest::prop_assert!(stopped.contains(&e.aggregate_id));
            }
        }
    }

    proptest::proptest! {
        /// Whatever is delivered, no event is taken before its aggregate's
        /// earlier ones were delivered, and every event is taken once or
        /// left over once.
        #[test]
        fn nothing_overtakes_and_nothing_is_lost(
            aggs in proptest::collection::vec(0u8..4, 0..30),
            fails in proptest::collection::vec(proptest::bool::weighted(0.2), 30),
            n in 1usize..5,
        ) {
            let batch: Vec<Event> = aggs
                .iter()
                .enumerate()
                .map(|(i, a)| ev(i as i64 + 1, &format!("agg{a}")))
                .collect();
            let total = batch.len();
            let mut l = Lanes::new(batch);
            let mut delivered: HashMap<String, i64> = HashMap::new();
            let mut stopped: std::collections::HashSet<String> = Default::default();
            let mut taken = 0;
            loop {
                let group = l.take(n);
                if group.is_empty() {
                    break;
                }
                for e in group {
                    taken += 1;
                    proptest::prop_assert!(!stopped.contains(&e.aggregate_id));
                    let last = delivered.get(&e.aggregate_id).copied().unwrap_or(0);
                    proptest::prop_assert!(e.seq > last);
                    if fails[e.seq as usize % 30] {
                        stopped.insert(e.aggregate_id.clone());
                    } else {
                        delivered.insert(e.aggregate_id.clone(), e.seq);
                        l.delivered(&e);
                    }
                }
            }
            let left = l.left_over();
            proptest::prop_assert_eq!(taken + left.len(), total);
            for e in &left {
                proptest::prop_assert!(stopped.contains(&e.aggregate_id));
            }
        }
    }
}
