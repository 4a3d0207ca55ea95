//! The list of every case, so a publisher's tests cannot leave one out:
//! tests here check [`CASES`] against the cases the suite defines and
//! against the suite macro every publisher's tests invoke; a test file that
//! calls cases by hand (an example, a publisher outside this project)
//! checks its own text with [`assert_runs_every_case`].

/// Every case of the suite, by function name.
pub const CASES: &[&str] = &[
    "delivers_a_batch",
    "maps_headers_key_and_destination",
    "calls_in_flight_at_once_each_settle_their_own_events",
    "keeps_aggregate_order",
    "drains_a_large_batch",
    "rejects_an_oversized_message",
    "delivers_every_event_as_stored",
    "outage_burns_no_attempts",
    "survives_a_broker_restart",
];

/// Panics unless `source` (a conformance test file's own text, from
/// `include_str!`) calls every case of [`CASES`], except those in `skipped`,
/// each given with the reason (a missing capability, said in the file).
pub fn assert_runs_every_case(source: &str, skipped: &[(&str, &str)]) {
    let missing: Vec<&str> = CASES
        .iter()
        .copied()
        .filter(|case| !skipped.iter().any(|(s, _)| s == case))
        .filter(|case| !source.contains(&format!("conformance::{case}(")))
        .collect();
    assert!(
        missing.is_empty(),
        "this publisher's conformance tests do not run {missing:?}: call each case, or skip it with the reason"
    );
    for (case, why) in skipped {
        assert!(CASES.contains(case), "{case:?} is not a conformance case");
        assert!(!why.trim().is_empty(), "say why {case:?} does not apply");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every public case function of the suite is in [`CASES`].
    #[test]
    fn the_catalogue_lists_every_case_the_suite_defines() {
        let sources = [
            include_str!("cases_direct.rs"),
            include_str!("cases_faithful.rs"),
            include_str!("cases_outage.rs"),
            include_str!("cases_relay.rs"),
        ];
        let defined: Vec<&str> = sources
            .iter()
            .flat_map(|s| s.lines())
            .filter_map(|l| l.strip_prefix("pub async fn "))
            .map(|l| l.split(['<', '(']).next().unwrap_or_default())
            .collect();
        assert_eq!(defined.len(), CASES.len(), "{defined:?}");
        for case in defined {
            assert!(CASES.contains(&case), "{case} is missing from CASES");
        }
    }

    /// The suite macro, which every publisher's tests invoke, runs every
    /// case.
    #[test]
    fn the_suite_macro_runs_every_case() {
        assert_runs_every_case(include_str!("suite.rs"), &[]);
    }

    #[test]
    fn a_file_that_leaves_a_case_out_is_caught() {
        let all: String = CASES
            .iter()
            .map(|c| format!("conformance::{c}(&h).await;\n"))
            .collect();
        assert_runs_every_case(&all, &[]);
        let without = all.replace("conformance::keeps_aggregate_order(", "");
        let caught = std::panic::catch_unwind(|| assert_runs_every_case(&without, &[]));
        assert!(caught.is_err());
        assert_runs_every_case(&without, &[("keeps_aggregate_order", "no order")]);
    }
}
