//! The console's actions (POST, after the session and CSRF checks): the
//! dead-letter confirmation and its retry or discard through the library's
//! `outbox::DeadLetters` (the same statements as `outbox dead-letters`),
//! and pause / resume. Each is logged (who, what, which, how many) at
//! warn level, so the default level (warn for every command but `relay`)
//! keeps the record.

use std::net::SocketAddr;

use hyper::StatusCode;

use outbox::Selector;

use super::answer::{failed, html, plain, redirect, Answer, App};
use super::forms::{self, Action, FieldError, Params};
use super::metrics::{action_of, Outcome};
use super::pages::{self, View};

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
            let (selector, what) = match (error.as_deref(), form.get("scope")) {
                (Some(text), Some("matching")) => match resolve(app, view, &selector, text).await {
                    Ok(found) => found,
                    Err(answer) => return answer,
                },
                _ => {
                    let what = selector.to_string();
                    (selector, what)
                }
            };
            let mut conn = match app.store.conn().await {
                Ok(c) => c,
                Err(e) => return failed(view, e),
            };
            if path == "/dead-letters/confirm" {
                // An empty id list (error text matching nothing) is not a
                // selector the library takes: nothing to count.
                if selector.validate().is_err() {
                    return html(
                        StatusCode::OK,
                        pages::dead_letters::confirm(view, form, action, 0, &what),
                    );
                }
                return match app.store.dead.count(&mut conn, &selector).await {
                    Ok(n) => html(
                        StatusCode::OK,
                        pages::dead_letters::confirm(view, form, action, n, &what),
                    ),
                    Err(e) => failed(view, e.into()),
                };
            }
            let done = match action {
                _ if selector.validate().is_err() => Ok(0),
                Action::Retry => app.store.dead.retry(&mut conn, &selector).await,
                Action::Discard => app.store.dead.discard(&mut conn, &selector).await,
            };
            let n = match done {
                Ok(n) => n,
                Err(e) => {
                    app.metrics.action(action.verb(), Outcome::Failed);
                    return failed(view, e.into());
                }
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
            app.sessions
                .set_flash(sid, format!("{past} {n} {noun} ({what})."));
            redirect("/dead-letters")
        }
        "/pause" | "/resume" => {
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
            let by = format!("console ({peer})");
            let changed = if path == "/pause" {
                app.store.pause_add(scope.as_deref(), &by).await
            } else {
                app.store.pause_remove(scope.as_deref()).await
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
            let message = match (path == "/pause", changed) {
                (true, true) => format!("Delivery paused for {shown}."),
                (true, false) => format!("Delivery was already paused for {shown}."),
                (false, true) => format!("Delivery resumed for {shown}."),
                (false, false) => format!("Delivery was not paused for {shown}."),
            };
            app.sessions.set_flash(sid, message);
            redirect("/")
        }
        _ => plain(StatusCode::NOT_FOUND, "not found"),
    }
}

/// Most dead letters an error-text filter may select at once.
const MAX_RESOLVED: usize = 100_000;

/// "Every dead letter matching" with error text, which the library's
/// selector cannot express: the matching ids, in seq order, as a selector,
/// and what it selects in words.
async fn resolve(
    app: &App,
    view: &View,
    filter: &Selector,
    text: &str,
) -> Result<(Selector, String), Answer> {
    let found = app.store.dead_letter_ids(filter, Some(text), MAX_RESOLVED);
    let ids = found.await.map_err(|e| failed(view, e))?;
    if ids.len() >= MAX_RESOLVED {
        let e = FieldError {
            field: "error".into(),
            message: format!("matches {MAX_RESOLVED} dead letters or more: narrow the filter"),
        };
        let page = pages::dead_letters::refused(view, &e);
        return Err(html(StatusCode::BAD_REQUEST, page));
    }
    let base = if filter.all {
        String::new()
    } else {
        format!("{filter}, ")
    };
    Ok((
        Selector::ids(ids),
        format!("{base}last error containing {text:?}"),
    ))
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
