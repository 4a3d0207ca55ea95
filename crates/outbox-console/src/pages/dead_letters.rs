//! Dead letters: filter, tick or take all matching, then retry or discard
//! after a confirmation that says how many.

use maud::{html, Markup};

use super::events::{next_link, table};
use super::layout::{csrf, field_error, link, notice, page, View};
use crate::forms::{Action, FieldError, Params};
use crate::selection::Selection;
use crate::store::{EventRow, Page};

/// The filter fields, as hidden inputs (carried into the action forms).
const FILTER: [&str; 6] = [
    "aggregate_type",
    "aggregate_id",
    "event_type",
    "error",
    "older_than",
    "newer_than",
];

fn hidden_filter(p: &Params) -> Markup {
    html! { @for k in FILTER { @if let Some(v) = p.get(k) { input type="hidden" name=(k) value=(v); } } }
}

pub fn list(
    view: &View,
    p: &Params,
    result: Result<Page<EventRow>, FieldError>,
    done: Option<&str>,
) -> Markup {
    let v = |k: &str| p.get(k).unwrap_or("").to_owned();
    let body = html! {
        (notice(done))
        form.search method="get" action=(view.at("/dead-letters")) {
            label { "Aggregate type " input type="text" name="aggregate_type" value=(v("aggregate_type")); }
            label { "Aggregate id " input type="text" name="aggregate_id" value=(v("aggregate_id")); }
            label { "Event type " input type="text" name="event_type" value=(v("event_type")); }
            label { "Last error contains " input type="text" name="error" value=(v("error")) maxlength="200"; }
            label { "Dead-lettered over (ago)" input type="text" name="older_than" value=(v("older_than")) placeholder="1h" size="8"; }
            label { "Dead-lettered within" input type="text" name="newer_than" value=(v("newer_than")) placeholder="7d" size="8"; }
            button type="submit" { "Filter" }
        }
        @match &result {
            Err(e) => (field_error(e)),
            Ok(page) => {
                @if page.items.is_empty() {
                    p { "No dead letter matches." }
                } @else {
                    @if !view.read_only {
                        form #dead-letter-action.actions method="post" action=(view.at("/dead-letters/confirm")) {
                            (csrf(view))
                            (hidden_filter(p))
                            label { input type="radio" name="scope" value="selected" checked; " the ticked dead letters" }
                            label { input type="radio" name="scope" value="matching"; " every dead letter matching the filter (all pages)" }
                            button type="submit" name="action" value="retry" { "Retry…" }
                            button.danger type="submit" name="action" value="discard" { "Discard…" }
                        }
                    }
                    (table(view, &page.items, !view.read_only))
                    @if let Some(after) = page.next_after {
                        p { a.next href=(next_link(&view.at("/dead-letters"), p, after)) { "Next page →" } }
                    }
                }
            }
        }
    };
    page(view, "Dead letters", "/dead-letters", body)
}

/// "Retry 3 dead letters?" with the same fields to post again, and the
/// selection shown (its count and fingerprint): the action runs on exactly
/// these dead letters, or is refused if they changed.
pub fn confirm(
    view: &View,
    p: &Params,
    action: Action,
    selection: &Selection,
    what: &str,
) -> Markup {
    let body = confirm_body(view, p, action, selection, what);
    page(view, "Confirm", "/dead-letters", body)
}

/// The confirmation itself, without the page around it.
fn confirm_body(
    view: &View,
    p: &Params,
    action: Action,
    selection: &Selection,
    what: &str,
) -> Markup {
    let count = selection.count;
    let noun = if count == 1 {
        "dead letter"
    } else {
        "dead letters"
    };
    let verb = match action {
        Action::Retry => "Retry",
        Action::Discard => "Discard",
    };
    html! {
        @if count == 0 {
            p { "Nothing to " (action.verb()) ": no dead letter matches (" bdi { (what) } ")." }
        } @else {
            p.confirm { (verb) " " strong #confirm-count { (count) } " " (noun) " (" bdi { (what) } ")?" }
            @match action {
                Action::Retry => p.hint { "They go back in the queue in their original order, with attempts from zero." },
                Action::Discard => p.hint { "They are deleted for good." },
            }
            form method="post" action=(view.at("/dead-letters/apply")) {
                (csrf(view))
                @for (k, v) in &p.0 {
                    @if k != "csrf" && k != "selection" { input type="hidden" name=(k) value=(v); }
                }
                input type="hidden" name="selection" value=(selection.token());
                button.danger[action == Action::Discard] type="submit" { (verb) " " (count) " " (noun) }
            }
        }
        p { a href=(link(&view.at("/dead-letters"), &FILTER.map(|k| (k, p.get(k))))) { "Back to the dead letters" } }
    }
}

/// The action refused because the dead letters it would act on are not
/// the ones confirmed (more or fewer match now, or others): nothing was
/// changed, and the new confirmation is shown below.
pub fn changed(
    view: &View,
    p: &Params,
    action: Action,
    confirmed: &str,
    now: &Selection,
    what: &str,
) -> Markup {
    let then = Selection::count_of(confirmed)
        .map(|n| n.to_string())
        .unwrap_or_else(|| "other".to_owned());
    let body = html! {
        p.error role="alert" #selection-changed {
            "Nothing was " (past(action)) ": the dead letters matching (" bdi { (what) } ") changed since the confirmation (" (then) " confirmed, " (now.count) " now). Check the new count and confirm again."
        }
    };
    let again = confirm_body(view, p, action, now, what);
    page(view, "Changed", "/dead-letters", html! { (body) (again) })
}

fn past(action: Action) -> &'static str {
    match action {
        Action::Retry => "retried",
        Action::Discard => "discarded",
    }
}

/// The error page of a refused form.
pub fn refused(view: &View, e: &FieldError) -> Markup {
    page(
        view,
        "Cannot do that",
        "/dead-letters",
        html! {
            (field_error(e))
            p { a href=(view.at("/dead-letters")) { "Back to the dead letters" } }
        },
    )
}
