//! Checks of the delivery guarantees: at least once, nothing invented, and
//! first deliveries in order per aggregate.

use std::collections::{HashMap, HashSet};

use uuid::Uuid;

/// Checks deliveries against what was enqueued and panics, prefixed with
/// `label`, unless every `expected` event was delivered, nothing else was,
/// and first deliveries kept per-aggregate order
/// ([`first_delivery_violation`]). `deliveries` come in delivery order as
/// `(event id, aggregate id, position in the aggregate)`. Returns the number
/// of duplicates (deliveries beyond the first of an event).
pub fn assert_delivered_once_in_order<'a>(
    label: &str,
    expected: impl IntoIterator<Item = &'a Uuid>,
    deliveries: &[(Uuid, &str, i64)],
) -> usize {
    let expected: HashSet<&Uuid> = expected.into_iter().collect();
    let seen: HashSet<&Uuid> = deliveries.iter().map(|(id, _, _)| id).collect();
    let invented: Vec<_> = seen.difference(&expected).take(5).collect();
    assert!(
        invented.is_empty(),
        "{label}events delivered that were never enqueued, e.g. {invented:?}"
    );
    let missing: Vec<_> = expected.difference(&seen).collect();
    assert!(
        missing.is_empty(),
        "{label}{} of {} events never delivered, e.g. {:?}",
        missing.len(),
        expected.len(),
        &missing[..missing.len().min(5)]
    );
    if let Some(v) = first_delivery_violation(deliveries.iter().map(|(_, a, n)| (*a, *n))) {
        panic!("{label}per-aggregate order broken: {v}");
    }
    deliveries.len() - seen.len()
}

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

    #[test]
    fn deliveries_are_checked_for_loss_invention_and_order() {
        let (a, b, c) = (Uuid::from_u128(1), Uuid::from_u128(2), Uuid::from_u128(3));
        let run = |deliveries: Vec<(Uuid, &'static str, i64)>| {
            std::panic::catch_unwind(|| assert_delivered_once_in_order("t: ", &[a, b], &deliveries))
        };
        assert_eq!(
            run(vec![(a, "x", 1), (b, "x", 2), (a, "x", 1)]).ok(),
            Some(1)
        );
        assert!(run(vec![(a, "x", 1)]).is_err(), "a lost event");
        assert!(
            run(vec![(a, "x", 1), (b, "x", 2), (c, "y", 1)]).is_err(),
            "an invented event"
        );
        assert!(run(vec![(b, "x", 2), (a, "x", 1)]).is_err(), "order broken");
    }
}
