//! Checks of the ordering guarantee.

use std::collections::{HashMap, HashSet};

/// Given deliveries in delivery order as `(aggregate_id, position)` where
/// `position` is the event's enqueue position within its aggregate, returns
/// the first violation: an event whose *first* delivery came before the
/// first delivery of an earlier event of the same aggregate. Redeliveries
/// (duplicates) are ignored.
pub fn first_delivery_violation<'a>(
    deliveries: impl IntoIterator<Item = (&'a str, i64)>,
) -> Option<String> {
    let mut seen: HashSet<(&str, i64)> = HashSet::new();
    let mut last: HashMap<&str, i64> = HashMap::new();
    for (agg, pos) in deliveries {
        if !seen.insert((agg, pos)) {
            continue;
        }
        if let Some(prev) = last.get(agg) {
            if pos < *prev {
                return Some(format!(
                    "aggregate {agg}: event {pos} first delivered after event {prev}"
                ));
            }
        }
        last.insert(agg, pos);
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn duplicates_are_fine_inversions_are_not() {
        assert_eq!(
            first_delivery_violation([("a", 1), ("a", 2), ("a", 1), ("b", 1), ("a", 3)]),
            None
        );
        assert!(first_delivery_violation([("a", 2), ("a", 1)]).is_some());
    }
}
