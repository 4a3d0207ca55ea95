//! The console's actions (POST, after the session and CSRF checks): the
//! dead-letter confirmation and its retry or discard through the library's
//! `outbox::DeadLetters` (the same statements as `outbox dead-letters`),
//! and pause / resume. Each is logged (who, what, which, how many) at
//! warn level, so the default level (warn for every command but `relay`)
//! keeps the record.

use std::net::SocketAddr;

use http::StatusCode;

use outbox::Selector;

use super::answer::{failed, html, plain, redirect, Answer, App};
use super::forms::{self, Action, FieldError, Params};
use super::metrics::{action_of, Outcome};
use super::pages::{self, View};
use super::selection::Selection;

pub async fn run(
    app: &App,
    path: &str,
    form: &Params,
    sid: &str,
    view: &View,
    peer: SocketAddr,
) -> Answer {
    let answer = act(app, path, form, sid, view, peer).await;
    // A form refused before anything ran (bad field, unknown path); the
    // outcomes of what ran are counted where they are known.
    let applying = path != "/dead-letters/confirm";
    if applying && (answer.status().is_client_error()) {
        app.metrics
            .action(action_of(path, form.get("action")), Outcome::Refused);
    }
    answer
}

async fn act(
    app: &App,
    path: &str,
    form: &Params,
    sid: &str,
    view: &View,
    peer: SocketAddr,
) -> Answer {
    match path {
        "/dead-letters/confirm" | "/dead-letters/apply" => {
            dead_letters(app, path, form, sid, view, peer).await
        }
        "/pause" | "/resume" => delivery(app, path, form, sid, view, peer).await,
        _ => plain(StatusCode::NOT_FOUND, "not found"),
    }
}

/// A dead-letter action: its confirmation (how many, and the selection's
/// fingerprint), or, confirmed, the action on exactly that selection.
async fn dead_letters(
    app: &App,
    path: &str,
    form: &Params,
    sid: &str,
    view: &View,
    peer: SocketAddr,
) -> Answer {
    let (action, selector) = match forms::dead_letter_action(form) {
        Ok(a) => a,
        Err(e) => {
            return html(
                StatusCode::BAD_REQUEST,
                pages::dead_letters::refused(view, &e),
            )
        }
    };
    let error = match forms::error_text(form) {
        Ok(e) => e,
        Err(e) => {
            return html(
                StatusCode::BAD_REQUEST,
                pages::dead_letters::refused(view, &e),
            )
        }
    };
    // Only what a confirmation showed is acted on: an action
    // without the confirmation's selection is refused, naming it.
    if path == "/dead-letters/apply" && form.get("selection").is_none() {
        let e = FieldError {
            field: "selection".into(),
            message: "is missing: confirm first (the confirmation says how many dead letters and carries the selection)".into(),
        };
        return html(
            StatusCode::BAD_REQUEST,
            pages::dead_letters::refused(view, &e),
        );
    }
    // What the action is about: the dead letters the form selects
    // now, as ids. The confirmation carries their fingerprint and
    // the action runs only on the same set.
    let matching = form.get("scope") == Some("matching");
    let what = match (error.as_deref(), matching) {
        (Some(text), true) if selector.all => format!("last error containing {text:?}"),
        (Some(text), true) => format!("{selector}, last error containing {text:?}"),
        _ => selector.to_string(),
    };
    let text = if matching { error.as_deref() } else { None };
    let ids = match selected_ids(app, view, &selector, text).await {
        Ok(ids) => ids,
        Err(answer) => return answer,
    };
    let selection = Selection::of(&ids);
    if path == "/dead-letters/confirm" {
        return html(
            StatusCode::OK,
            pages::dead_letters::confirm(view, form, action, &selection, &what),
        );
    }
    let confirmed = form.get("selection").unwrap_or_default();
    if confirmed != selection.token() {
        app.metrics.action(action.verb(), Outcome::Refused);
        let page = pages::dead_letters::changed(view, form, action, confirmed, &selection, &what);
        return html(StatusCode::CONFLICT, page);
    }
    let n = match apply(app, view, action, ids).await {
        Ok(n) => n,
        Err(answer) => return answer,
    };
    let outcome = if n > 0 {
        Outcome::Changed
    } else {
        Outcome::Unchanged
    };
    app.metrics.action(action.verb(), outcome);
    tracing::warn!(%peer, action = action.verb(), selector = %what, count = n, "console dead-letter action");
    if action == Action::Retry {
        wake(app).await;
    }
    let past = match action {
        Action::Retry => "Retried",
        Action::Discard => "Discarded",
    };
    let noun = if n == 1 {
        "dead letter"
    } else {
        "dead letters"
    };
    let notice = maud::html! { (past) " " (n) " " (noun) " (" bdi { (what) } ")." };
    app.sessions.set_flash(sid, notice);
    redirect(&app.at("/dead-letters"))
}

/// Runs `action` on exactly the dead letters `ids`; how many changed, or
/// the page saying what failed.
async fn apply(
    app: &App,
    view: &View,
    action: Action,
    ids: Vec<uuid::Uuid>,
) -> Result<u64, Answer> {
    let mut conn = match app.store.conn().await {
        Ok(c) => c,
        Err(e) => return Err(failed(view, e)),
    };
    let exact = Selector::ids(ids);
    let done = match action {
        _ if exact.validate().is_err() => Ok(0),
        Action::Retry => app.store.dead.retry(&mut conn, &exact).await,
        Action::Discard => app.store.dead.discard(&mut conn, &exact).await,
    };
    let n = match done {
        Ok(n) => n,
        Err(e) => {
            app.metrics.action(action.verb(), Outcome::Failed);
            let doing = match action {
                Action::Retry => "retrying dead letters",
                Action::Discard => "discarding dead letters",
            };
            return Err(failed(view, anyhow::Error::new(e).context(doing)));
        }
    };
    Ok(n)
}

/// A pause or a resume of delivery, for everything or one aggregate type.
async fn delivery(
    app: &App,
    path: &str,
    form: &Params,
    sid: &str,
    view: &View,
    peer: SocketAddr,
) -> Answer {
    let scope = match forms::pause_scope(form) {
        Ok(s) => s,
        Err(e) => {
            return html(
                StatusCode::BAD_REQUEST,
                pages::dead_letters::refused(view, &e),
            )
        }
    };
    let shown = scope
        .as_deref()
        .map(|t| format!("aggregate type {t}"))
        .unwrap_or_else(|| "everything".into());
    // The notice's HTML: a stored type isolated from the sentence.
    let scope_html = match scope.as_deref() {
        Some(t) => maud::html! { "aggregate type " bdi { code { (t) } } },
        None => maud::html! { "everything" },
    };
    let by = format!("console ({peer})");
    let mut switching = false;
    let changed = if path == "/pause" {
        app.store.pause_add(scope.as_deref(), &by).await
    } else {
        app.store
            .pause_remove(scope.as_deref())
            .await
            .map(|(lifted, held)| {
                switching = held;
                lifted
            })
    };
    let verb = if path == "/pause" { "pause" } else { "resume" };
    let changed = match changed {
        Ok(c) => c,
        Err(e) => {
            app.metrics.action(verb, Outcome::Failed);
            return failed(view, e);
        }
    };
    let outcome = if changed {
        Outcome::Changed
    } else {
        Outcome::Unchanged
    };
    app.metrics.action(verb, outcome);
    tracing::warn!(%peer, action = verb, scope = %shown, changed, "console delivery action");
    if path == "/resume" {
        wake(app).await;
    }
    let message = pause_notice(path == "/pause", changed, switching, scope_html);
    app.sessions.set_flash(sid, message);
    redirect(&app.at("/"))
}

/// What the page says after a pause or a resume of `scope_html`.
fn pause_notice(
    pause: bool,
    changed: bool,
    switching: bool,
    scope_html: maud::Markup,
) -> maud::Markup {
    match (pause, changed) {
        _ if switching => {
            maud::html! { "Delivery stays paused for everything: the schema is switching back to the table mode, and the relay lifts this pause once it has read the replication slot to the switch (rows written since must not overtake the events still in it)." }
        }
        (true, true) => maud::html! { "Delivery paused for " (scope_html) "." },
        (true, false) => {
            maud::html! { "Delivery was already paused for " (scope_html) "." }
        }
        (false, true) => maud::html! { "Delivery resumed for " (scope_html) "." },
        (false, false) => maud::html! { "Delivery was not paused for " (scope_html) "." },
    }
}

/// Most dead letters one action may select.
const MAX_RESOLVED: usize = 100_000;

/// The ids of the dead letters `filter` (and the error text `text`, which
/// the library's selector has no criterion for) selects now, in seq order;
/// refused when there are [`MAX_RESOLVED`] or more.
async fn selected_ids(
    app: &App,
    view: &View,
    filter: &Selector,
    text: Option<&str>,
) -> Result<Vec<uuid::Uuid>, Answer> {
    if filter.validate().is_err() {
        return Ok(Vec::new());
    }
    let found = app.store.dead_letter_ids(filter, text, MAX_RESOLVED);
    let ids = found.await.map_err(|e| failed(view, e))?;
    if ids.len() >= MAX_RESOLVED {
        let e = FieldError {
            field: if text.is_some() { "error" } else { "scope" }.into(),
            message: format!("matches {MAX_RESOLVED} dead letters or more: narrow the filter"),
        };
        let page = pages::dead_letters::refused(view, &e);
        return Err(html(StatusCode::BAD_REQUEST, page));
    }
    Ok(ids)
}

/// Wakes idle relays now instead of at their next poll (the same NOTIFY a
/// producer sends). A failure only leaves it to the poll.
async fn wake(app: &App) {
    if let Ok(mut conn) = app.store.conn().await {
        let _ = sqlx::query("SELECT pg_notify($1, '')")
            .bind(&app.channel)
            .execute(&mut *conn)
            .await;
    }
}
