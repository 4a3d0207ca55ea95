//! Finding events (by id, by aggregate, by event type and time, by state;
//! keyset pages) and one event's detail.

use maud::{html, Markup};

use super::layout::{field_error, link, page, time, View};
use crate::forms::{FieldError, Params};
use crate::json_pretty::pretty;
use crate::store::{EventDetail, EventRow, Page};

/// The search form, refilled from `p`.
fn search_form(view: &View, p: &Params) -> Markup {
    let v = |k: &str| p.get(k).unwrap_or("").to_owned();
    html! {
        form.search method="get" action=(view.at("/events")) {
            label { "Event id " input type="text" name="id" value=(v("id")) size="36"; }
            label { "Aggregate type " input type="text" name="aggregate_type" value=(v("aggregate_type")); }
            label { "Aggregate id " input type="text" name="aggregate_id" value=(v("aggregate_id")); }
            label { "Event type " input type="text" name="event_type" value=(v("event_type")); }
            label { "Created from (UTC) " input type="text" name="from" value=(v("from")) placeholder="2026-01-31T14:05"; }
            label { "to " input type="text" name="to" value=(v("to")); }
            label { "State " select name="state" {
                @for s in ["", "pending", "retrying", "processed", "dead"] {
                    option value=(s) selected[p.get("state") == Some(s)] { (if s.is_empty() { "any" } else { s }) }
                }
            } }
            button type="submit" { "Find" }
        }
    }
}

/// A table of events; `select` adds a checkbox per row (dead letters).
pub fn table(view: &View, rows: &[EventRow], select: bool) -> Markup {
    html! {
        table.events {
            thead { tr {
                @if select { th { span.sr { "Select" } } }
                th { "Seq" } th { "Event" } th { "Aggregate" } th { "State" } th { "Attempts" }
                th { "Created" } th { "Last error" }
            } }
            tbody { @for r in rows {
                tr {
                    @if select { td { input type="checkbox" name="id" value=(r.id) form="dead-letter-action"; } }
                    td { (r.seq) }
                    td { a href=(view.at(&format!("/events/{}", r.id))) { bdi { (r.event_type) } } }
                    td { a href=(link(&view.at("/events"), &[("aggregate_type", Some(&r.aggregate_type)), ("aggregate_id", Some(&r.aggregate_id))])) {
                        code { bdi { (r.aggregate_type) } "/" bdi { (r.aggregate_id) } }
                    } }
                    td { span class=(format!("state {}", r.state)) { (r.state) } }
                    td { (r.attempts) }
                    td { (time(&r.created_at)) }
                    td.error-text { bdi { (r.last_error.as_deref().map(|e| short(e, 120)).unwrap_or_else(|| "-".into())) } }
                }
            } }
        }
    }
}

/// The first `max` characters of `text`, with `…` when cut.
fn short(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        text.to_owned()
    } else {
        text.chars().take(max - 1).chain(['…']).collect()
    }
}

/// The link to the page after `after`, keeping the other parameters.
pub fn next_link(path: &str, p: &Params, after: i64) -> String {
    let after = after.to_string();
    let mut pairs: Vec<(&str, Option<&str>)> =
        p.0.iter()
            .filter(|(k, _)| k != "after" && k != "done")
            .map(|(k, v)| (k.as_str(), Some(v.as_str())))
            .collect();
    pairs.push(("after", Some(&after)));
    link(path, &pairs)
}

pub fn search(
    view: &View,
    p: &Params,
    result: Result<Option<(Page<EventRow>, i64)>, FieldError>,
) -> Markup {
    let body = html! {
        (search_form(view, p))
        @match &result {
            Err(e) => (field_error(e)),
            Ok(None) => p.hint { "Give an aggregate (type and id) for its whole history in order, an event type and a time range, or a state. Table size: see below once you search." },
            Ok(Some((page, estimate))) => {
                p.hint {
                    @if *estimate > 0 { "About " (estimate) " rows in the table (the planner's estimate; nothing is counted). " }
                    @else { "The table's size is not estimated yet (no ANALYZE has run); nothing is counted. " }
                    "Pages follow insertion order (seq)."
                }
                @if page.items.is_empty() { p { "No event matches." } } @else { (table(view, &page.items, false)) }
                @if let Some(after) = page.next_after {
                    p { a.next href=(next_link(&view.at("/events"), p, after)) { "Next page →" } }
                }
            }
        }
    };
    page(view, "Events", "/events", body)
}

pub fn detail(view: &View, e: &EventDetail, trace_link: Option<String>) -> Markup {
    let r = &e.row;
    let body = html! {
        dl.detail {
            dt { "Id" } dd { code { (r.id) } }
            dt { "Seq" } dd { (r.seq) }
            dt { "Aggregate" } dd { a href=(link(&view.at("/events"), &[("aggregate_type", Some(&r.aggregate_type)), ("aggregate_id", Some(&r.aggregate_id))])) {
                code { bdi { (r.aggregate_type) } "/" bdi { (r.aggregate_id) } } } " (its whole history)" }
            dt { "Event type" } dd { bdi { code { (r.event_type) } } }
            dt { "State" } dd { span class=(format!("state {}", r.state)) { (r.state) } }
            dt { "Attempts" } dd { (r.attempts) }
            dt { "Topic override" } dd { bdi { (r.topic.as_deref().unwrap_or("-")) } }
            dt { "Partition" } dd { (r.partition) }
            dt { "Created" } dd { (time(&r.created_at)) }
            dt { "Processed" } dd { (time(&r.processed_at)) }
            dt { "Next attempt" } dd { (time(&r.next_attempt_at)) }
            dt { "Dead-lettered" } dd { (time(&r.dead_lettered_at)) }
            dt { "Last error" } dd { pre.error-text dir="auto" { bdi { (r.last_error.as_deref().unwrap_or("-")) } } }
            @if let Some(href) = &trace_link {
                dt { "Trace" } dd { a href=(href) rel="noreferrer" { "open the trace" } }
            }
        }
        h2 { "Payload" }
        p.hint { "As stored (the jsonb text), only re-indented: numbers and strings are shown exactly." }
        pre.json id="payload" { (pretty(&e.payload)) }
        h2 { "Headers" }
        pre.json id="headers" { (pretty(&e.headers)) }
    };
    page(view, "Event", "/events", body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_next_page_link_keeps_the_criteria_and_moves_after() {
        let p = Params::parse("aggregate_type=order&after=10&done=x");
        assert_eq!(
            next_link("/events", &p, 60),
            "/events?aggregate_type=order&after=60"
        );
    }

    #[test]
    fn long_errors_are_cut() {
        assert_eq!(short("abcdef", 4), "abc…");
        assert_eq!(short("abc", 4), "abc");
    }
}
