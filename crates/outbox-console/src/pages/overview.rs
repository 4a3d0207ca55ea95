//! The overview (figures, pauses, relays, unowned partitions) and the
//! stuck aggregates.

use maud::{html, Markup};

use super::layout::{age, csrf, link, page, time, View};
use crate::store::{Overview, Stuck};

/// The overview's figures as (name, shown text): the page renders them and
/// `/overview.json` serves them to the refresh script, so both say the same.
pub fn figures(o: &Overview) -> Vec<(&'static str, String)> {
    let paused = match (
        o.pauses.iter().any(|p| p.aggregate_type.is_none()),
        o.pauses.len(),
    ) {
        (true, _) => "everything".to_owned(),
        (false, 0) => "nothing".to_owned(),
        (false, n) => format!("{n} aggregate type{}", if n == 1 { "" } else { "s" }),
    };
    vec![
        ("delivery", o.delivery.clone()),
        ("pending", o.pending.shown()),
        ("oldest_claimable", age(o.oldest_claimable_s)),
        (
            "delivered",
            o.delivered
                .map(|r| r.shown())
                .unwrap_or_else(|| "- (measuring)".into()),
        ),
        ("retrying", o.retrying.shown()),
        ("dead_letters", o.dead_letters.shown()),
        ("relays", o.relays.len().to_string()),
        ("unowned", o.unowned.len().to_string()),
        ("paused", paused),
        ("oldest_transaction", age(o.oldest_xact_s)),
        (
            "xmin_age",
            o.oldest_xmin_age
                .map(|n| format!("{n} transactions"))
                .unwrap_or_else(|| "-".into()),
        ),
    ]
}

const LABELS: [(&str, &str); 11] = [
    ("delivery", "Delivery"),
    ("pending", "Pending"),
    ("oldest_claimable", "Oldest claimable pending"),
    ("delivered", "Delivered per second"),
    ("retrying", "Retrying"),
    ("dead_letters", "Dead letters"),
    ("relays", "Relays"),
    ("unowned", "Unowned partitions"),
    ("paused", "Delivery paused for"),
    ("oldest_transaction", "Oldest open transaction"),
    ("xmin_age", "Oldest snapshot holds back"),
];

pub fn overview(view: &View, o: &Overview, notice: Option<&str>) -> Markup {
    let figures = figures(o);
    let body = html! {
        (super::layout::notice(notice))
        section.figures data-refresh=(view.at("/overview.json")) {
            @for (key, label) in LABELS {
                @let value = figures.iter().find(|(k, _)| *k == key).map(|(_, v)| v.as_str()).unwrap_or("-");
                div.figure {
                    span.label { (label) }
                    span.value data-figure=(key) { (value) }
                }
            }
        }
        p.hint { "Figures refresh every few seconds while JavaScript is on; reload the page otherwise." }
        h2 { "Paused delivery" }
        @if o.pauses.is_empty() {
            p { "Delivery is running for every aggregate type." }
        } @else {
            table {
                thead { tr { th { "Scope" } th { "Since" } th { "By" } th {} } }
                tbody {
                    @for p in &o.pauses {
                        tr {
                            td { @match &p.aggregate_type {
                                None => strong { "everything" },
                                Some(t) => { "aggregate type " bdi { code { (t) } } },
                            } }
                            td { (time(&p.paused_at)) }
                            td { bdi { (p.paused_by) } }
                            td { @if !view.read_only {
                                form method="post" action=(view.at("/resume")) {
                                    (csrf(view))
                                    @match &p.aggregate_type {
                                        None => input type="hidden" name="scope" value="all";,
                                        Some(t) => {
                                            input type="hidden" name="scope" value="type";
                                            input type="hidden" name="aggregate_type" value=(t);
                                        },
                                    }
                                    button type="submit" { "Resume" }
                                }
                            } }
                        }
                    }
                }
            }
        }
        @if !view.read_only {
            form.inline method="post" action=(view.at("/pause")) {
                (csrf(view))
                label { "Pause " select name="scope" {
                    option value="type" { "one aggregate type" }
                    option value="all" { "everything" }
                } }
                label { "Aggregate type " input type="text" name="aggregate_type" maxlength="100"; }
                button type="submit" { "Pause delivery" }
            }
        }
        h2 { "Relays" }
        @if o.relays.is_empty() {
            p { "No relay has announced itself." }
        } @else {
            table {
                thead { tr {
                    th { "Instance" } th { "Partitions held" } th { "Highest epoch" }
                    th { "Lease ends in" } th { "Last heartbeat" } th { "Started" }
                } }
                tbody { @for r in &o.relays {
                    tr {
                        td { bdi { code { (r.instance) } } }
                        td { (r.partitions.len()) @if !r.partitions.is_empty() {
                            " " span.muted { "(" (ranges(&r.partitions)) ")" }
                        } }
                        td { (r.max_epoch.map(|e| e.to_string()).unwrap_or_else(|| "-".into())) }
                        td { (r.lease_left_ms.map(|ms| format!("{:.1} s", ms as f64 / 1000.0)).unwrap_or_else(|| "-".into())) }
                        td { (time(&r.heartbeat_at)) " (" (age(Some(r.heartbeat_age_ms as f64 / 1000.0))) " ago)" }
                        td { (time(&r.started_at)) }
                    }
                } }
            }
        }
        h2 { "Partitions no relay holds" }
        @if o.unowned.is_empty() {
            p { "Every partition is held under a live lease." }
        } @else {
            p { (o.unowned.len()) " partitions: "
                (ranges(&o.unowned.iter().map(|(p, _)| *p).collect::<Vec<_>>())) }
        }
    };
    page(view, "Overview", "/", body)
}

/// `0-3, 7, 9-10`.
pub fn ranges(parts: &[i32]) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < parts.len() {
        let start = parts[i];
        let mut end = start;
        while i + 1 < parts.len() && parts[i + 1] == end + 1 {
            i += 1;
            end = parts[i];
        }
        out.push(if start == end {
            start.to_string()
        } else {
            format!("{start}-{end}")
        });
        i += 1;
    }
    out.join(", ")
}

pub fn stuck(view: &View, rows: &[Stuck], limit: i64) -> Markup {
    let body = html! {
        p.hint { "Aggregates whose oldest failing event is retrying (it holds back every later event of its aggregate) or dead-lettered (later events move on without it), oldest first." }
        @if rows.is_empty() {
            p { "Nothing is stuck: no event is retrying or dead-lettered." }
        } @else {
            table {
                thead { tr {
                    th { "Aggregate" } th { "Head event" } th { "State" } th { "Attempts" }
                    th { "Pending behind it" } th { "Next attempt" } th { "Last error" }
                } }
                tbody { @for s in rows {
                    tr {
                        td { a href=(link(&view.at("/events"), &[("aggregate_type", Some(&s.aggregate_type)), ("aggregate_id", Some(&s.aggregate_id))])) {
                            code { bdi { (s.aggregate_type) } "/" bdi { (s.aggregate_id) } }
                        } }
                        td { a href=(view.at(&format!("/events/{}", s.id))) { bdi { (s.event_type) } } }
                        td { @if s.dead_lettered_at.is_some() { span.state.dead { "dead-lettered" } } @else { span.state.retrying { "retrying" } } }
                        td { (s.attempts) }
                        td { (s.behind) }
                        td { (time(&s.next_attempt_at)) }
                        td.error-text { bdi { (s.last_error.as_deref().unwrap_or("-")) } }
                    }
                } }
            }
            @if rows.len() as i64 >= limit { p.hint { "Showing the oldest " (limit) "." } }
        }
    };
    page(view, "Stuck aggregates", "/stuck", body)
}

#[cfg(test)]
mod tests {
    use super::ranges;

    #[test]
    fn partitions_are_shown_as_ranges() {
        assert_eq!(ranges(&[0, 1, 2, 3, 7, 9, 10]), "0-3, 7, 9-10");
        assert_eq!(ranges(&[]), "");
    }
}
