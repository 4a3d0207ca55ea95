//! Waves: how a batch is published without ever letting an event overtake
//! an earlier event of its aggregate.

use std::collections::HashMap;

use crate::event::Event;

/// Splits a batch (in seq order) into waves: wave `k` holds the `k`-th event
/// of every aggregate, so no wave has two events of one aggregate and each
/// event's predecessor was published (and acknowledged) in an earlier wave.
pub fn into_waves(batch: Vec<Event>) -> Vec<Vec<Event>> {
    let mut rank: Vec<usize> = Vec::with_capacity(batch.len());
    let mut waves = 1;
    {
        let mut seen: HashMap<&str, usize> = HashMap::with_capacity(batch.len());
        for e in &batch {
            let r = seen.entry(e.aggregate_id.as_str()).or_insert(0);
            rank.push(*r);
            *r += 1;
            waves = waves.max(*r);
        }
    }
    if waves == 1 {
        return vec![batch];
    }
    let mut out: Vec<Vec<Event>> = (0..waves).map(|_| Vec::new()).collect();
    for (e, r) in batch.into_iter().zip(rank) {
        out[r].push(e);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::test_event as ev;

    #[test]
    fn waves_keep_aggregate_order_and_never_repeat_an_aggregate() {
        let batch = vec![
            ev(1, "a"),
            ev(2, "b"),
            ev(3, "a"),
            ev(4, "a"),
            ev(5, "c"),
            ev(6, "b"),
        ];
        let waves = into_waves(batch);
        let seqs: Vec<Vec<i64>> = waves
            .iter()
            .map(|w| w.iter().map(|e| e.seq).collect())
            .collect();
        assert_eq!(seqs, vec![vec![1, 2, 5], vec![3, 6], vec![4]]);
        let single = into_waves(vec![ev(1, "a"), ev(2, "b")]);
        assert_eq!(single.len(), 1);
    }
}
