// Why this file is long: the session and CSRF gate and every GET route share one request context; split, each part would re-derive it.
//! The console's HTTP side, over any `http::Request`: the base path
//! stripped, sessions and CSRF checks in front of every route, security
//! headers on every answer, and the routes themselves (each a few lines
//! over the store and a page).

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use http::header::{HeaderValue, ALLOW, CACHE_CONTROL, RETRY_AFTER, SET_COOKIE};
use http::{Method, Request, StatusCode};
use http_body_util::{BodyExt, Limited};
use uuid::Uuid;

use super::answer::{answer, failed, failure_text, html, plain, redirect, Answer, App};
use super::auth::{self, Refusal, Session, COOKIE};
use super::forms::{self, Params};
use super::metrics::{action_of, Outcome};
use super::pages::{self, View};
use super::throttle::{Client, Failure, Verdict, TALLY_WINDOW};

/// Largest form accepted.
const MAX_BODY: usize = 1 << 20;
/// Time a client has to send a form once its request head is in: a
/// connection sending its body slowly is busy to the accept loop, which
/// never closes it to make room, so the console ends it.
const BODY_TIMEOUT: Duration = Duration::from_secs(10);
/// Rows per page of events and dead letters.
pub const PAGE_SIZE: usize = 50;
/// Stuck aggregates shown.
const STUCK_LIMIT: i64 = 200;

const JS: &str = include_str!("assets/console.js");
const CSS: &str = include_str!("assets/console.css");

/// The console's answer to `req` from `peer`, timed (`Server-Timing`):
/// what `outbox console`, the relay's server (`outbox relay --console`)
/// and a service mounting the console serve.
pub async fn answer_request<B>(app: &App, req: Request<B>, peer: SocketAddr) -> Answer
where
    B: http_body::Body,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let started = std::time::Instant::now();
    let mut r = handle(app, req, peer).await;
    server_timing(&mut r, started.elapsed());
    r
}

/// Says how long the handler took (`Server-Timing: handler;dur=` ms), the
/// figure `bench console` reports and a browser's developer tools show.
fn server_timing(r: &mut Answer, took: Duration) {
    let value = format!("handler;dur={:.3}", took.as_secs_f64() * 1000.0);
    if let Ok(v) = HeaderValue::from_str(&value) {
        r.headers_mut().insert("server-timing", v);
    }
}

/// Sets the session cookie, for the console's paths only.
fn set_cookie(app: &App, mut r: Answer, value: &str, max_age: Option<u64>) -> Answer {
    let age = max_age
        .map(|s| format!("; Max-Age={s}"))
        .unwrap_or_default();
    let path = if app.base.is_empty() { "/" } else { &app.base };
    let cookie = format!("{COOKIE}={value}; Path={path}; HttpOnly; SameSite=Strict{age}");
    if let Ok(v) = HeaderValue::from_str(&cookie) {
        r.headers_mut().append(SET_COOKIE, v);
    }
    r
}

fn header<'a, B>(req: &'a Request<B>, name: &str) -> Option<&'a str> {
    req.headers().get(name).and_then(|v| v.to_str().ok())
}

/// The console's own path of a request for `full` (`/outbox/events` →
/// `/events`), or `None` outside the base path. The base path alone is
/// the overview.
fn own_path<'a>(base: &str, full: &'a str) -> Option<&'a str> {
    match full.strip_prefix(base)? {
        "" => Some("/"),
        rest if rest.starts_with('/') => Some(rest),
        _ => None,
    }
}

/// The console's answer to a request: the gates that need no session
/// (the Host, the path, the method, the open routes), then the form, the
/// session, and the route. A session opened here comes back as a cookie.
async fn handle<B>(app: &App, req: Request<B>, peer: SocketAddr) -> Answer
where
    B: http_body::Body,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let full = req.uri().path().to_owned();
    let own = own_path(&app.base, &full).map(str::to_owned);
    if let Some(refused) = refused_host(app, &req, own.as_deref().unwrap_or(&full), peer) {
        return refused;
    }
    let Some(path) = own else {
        return plain(StatusCode::NOT_FOUND, "not found");
    };
    if let Some(refused) = refused_method(app, req.method(), &full, &path) {
        return refused;
    }
    if let Some(r) = open_route(app, req.method(), &path) {
        return r;
    }
    let head = Head::of(&req);
    let form = match form_of(&head.method, req.into_body()).await {
        Ok(form) => form,
        Err(refused) => return refused,
    };
    if path == "/login" {
        return login(
            app,
            &head.method,
            &form,
            head.origin.as_deref(),
            head.host.as_deref(),
            peer,
        )
        .await;
    }
    let (sid, session, new_cookie) = match session_of(app, &head, &path, &form) {
        Ok(found) => found,
        Err(refused) => return *refused,
    };
    let mut r = routed(app, &head, &path, &form, &sid, &session, peer).await;
    if new_cookie {
        r = set_cookie(app, r, &sid, None);
    }
    r
}

/// What the console reads of a request besides its path and body.
struct Head {
    method: Method,
    query: Params,
    /// The session cookie's value, if one came.
    cookie_id: Option<String>,
    origin: Option<String>,
    host: Option<String>,
}

impl Head {
    fn of<B>(req: &Request<B>) -> Head {
        Head {
            method: req.method().clone(),
            query: Params::parse(req.uri().query().unwrap_or("")),
            cookie_id: header(req, "cookie")
                .and_then(|c| auth::cookie(c, COOKIE))
                .map(str::to_owned),
            origin: header(req, "origin").map(str::to_owned),
            host: header(req, "host").map(str::to_owned),
        }
    }
}

/// Refuses a request whose Host is not loopback when the console has no
/// password: without one the console is loopback only
/// (auth::loopback_host). A refused POST counts as its action refused.
fn refused_host<B>(app: &App, req: &Request<B>, path: &str, peer: SocketAddr) -> Option<Answer> {
    if app.password.is_some() || auth::loopback_host(header(req, "host")) {
        return None;
    }
    tracing::warn!(%peer, host = ?header(req, "host"), "console request refused: not a loopback Host");
    if req.method() == Method::POST {
        app.metrics.action(action_of(path, None), Outcome::Refused);
    }
    Some(plain(
        StatusCode::FORBIDDEN,
        "refused: without a password the console answers only to localhost or a loopback address in Host",
    ))
}

/// Refuses (405, with `Allow`) a method the route does not take; a
/// refused POST counts as its action refused.
fn refused_method(app: &App, method: &Method, full: &str, path: &str) -> Option<Answer> {
    let allow = allowed_methods(path)?;
    if allow.split(", ").any(|a| a == method.as_str()) {
        return None;
    }
    if method == Method::POST {
        app.metrics.action(action_of(path, None), Outcome::Refused);
    }
    let mut r = plain(
        StatusCode::METHOD_NOT_ALLOWED,
        &format!("refused: {full} takes {allow}"),
    );
    r.headers_mut()
        .insert(ALLOW, HeaderValue::from_static(allow));
    Some(r)
}

/// The routes answered without a session: the assets, and the metrics
/// (counts only, nothing read from the database: open to a scraper as the
/// relay's /metrics is).
fn open_route(app: &App, method: &Method, path: &str) -> Option<Answer> {
    match path {
        "/assets/console.js" => Some(asset("text/javascript; charset=utf-8", JS)),
        "/assets/console.css" => Some(asset("text/css; charset=utf-8", CSS)),
        "/metrics" if method == Method::GET => Some(answer(
            StatusCode::OK,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
            app.metrics.encode(),
        )),
        _ => None,
    }
}

/// The form a POST carries, read within [`BODY_TIMEOUT`] and up to
/// [`MAX_BODY`]; other methods carry none.
async fn form_of<B>(method: &Method, body: B) -> Result<Params, Answer>
where
    B: http_body::Body,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    if method != Method::POST {
        return Ok(Params::default());
    }
    let body = Limited::new(body, MAX_BODY).collect();
    match tokio::time::timeout(BODY_TIMEOUT, body).await {
        Ok(Ok(body)) => Ok(Params::parse(&String::from_utf8_lossy(&body.to_bytes()))),
        Ok(Err(_)) => Err(plain(StatusCode::PAYLOAD_TOO_LARGE, "form too large")),
        Err(_) => Err(plain(
            StatusCode::REQUEST_TIMEOUT,
            "refused: the form did not arrive within 10 s",
        )),
    }
}

/// What a request without a signed-in session gets.
#[derive(Debug, PartialEq)]
enum Unsigned {
    /// A session opens for it: a GET to a console without a password.
    Open,
    /// The sign-in page: a GET to a console with one.
    SignIn,
    /// A refusal (403): any other method, a POST among them, which
    /// changes nothing without a session.
    Refuse,
}

impl Unsigned {
    fn of(password: bool, method: &Method) -> Unsigned {
        if method != Method::GET {
            Unsigned::Refuse
        } else if password {
            Unsigned::SignIn
        } else {
            Unsigned::Open
        }
    }
}

/// The request's session: the signed-in one its cookie names, or one
/// opened for it (`true`: its cookie is to be set); else the sign-in page,
/// or a refusal counted as its action refused.
fn session_of(
    app: &App,
    head: &Head,
    path: &str,
    form: &Params,
) -> Result<(String, Session, bool), Box<Answer>> {
    let known = head
        .cookie_id
        .as_deref()
        .and_then(|id| app.sessions.get(id).map(|s| (id.to_owned(), s)));
    match known {
        Some((id, s)) if s.signed_in => return Ok((id, s, false)),
        _ => {}
    }
    match Unsigned::of(app.password.is_some(), &head.method) {
        Unsigned::Open => {
            let (id, s) = app.sessions.open(true, false);
            Ok((id, s, true))
        }
        Unsigned::SignIn => Err(Box::new(redirect(&app.at("/login")))),
        Unsigned::Refuse => {
            app.metrics
                .action(action_of(path, form.get("action")), Outcome::Refused);
            Err(Box::new(plain(StatusCode::FORBIDDEN, not_signed_in(app))))
        }
    }
}

/// A route's answer within a session: a query or form the store cannot
/// hold refused (400), a POST's action, a GET's or HEAD's page.
async fn routed(
    app: &App,
    head: &Head,
    path: &str,
    form: &Params,
    sid: &str,
    session: &Session,
    peer: SocketAddr,
) -> Answer {
    let view = View {
        csrf: session.csrf.clone(),
        read_only: app.read_only,
        password: app.password.is_some(),
        schema: app.schema.clone(),
        base: app.base.clone(),
    };
    let method = &head.method;
    if let Err(e) = head.query.storable().and_then(|()| form.storable()) {
        if method == Method::POST {
            app.metrics
                .action(action_of(path, form.get("action")), Outcome::Refused);
        }
        html(
            StatusCode::BAD_REQUEST,
            pages::layout::refused(&view, &e, path),
        )
    } else if method == Method::POST {
        post(
            app,
            path,
            form,
            sid,
            session,
            head.origin.as_deref(),
            head.host.as_deref(),
            &view,
            peer,
        )
        .await
    } else if method == Method::GET || method == Method::HEAD {
        get(app, path, &head.query, sid, &view).await
    } else {
        plain(StatusCode::METHOD_NOT_ALLOWED, "use GET or POST")
    }
}

/// The methods a console route takes (`Allow`), `None` for a path that
/// is no route (404).
fn allowed_methods(path: &str) -> Option<&'static str> {
    match path {
        "/"
        | "/overview.json"
        | "/stuck"
        | "/events"
        | "/dead-letters"
        | "/metrics"
        | "/assets/console.js"
        | "/assets/console.css" => Some("GET, HEAD"),
        "/login" => Some("GET, HEAD, POST"),
        "/logout" | "/pause" | "/resume" | "/dead-letters/confirm" | "/dead-letters/apply" => {
            Some("POST")
        }
        _ if path
            .strip_prefix("/events/")
            .is_some_and(|id| Uuid::parse_str(id).is_ok()) =>
        {
            Some("GET, HEAD")
        }
        _ => None,
    }
}

/// Why a POST without a live session is refused: a console without a
/// password has no sign-in to send the user to.
fn not_signed_in(app: &App) -> &'static str {
    if app.password.is_some() {
        "refused: sign in first"
    } else {
        "refused: this page's session has ended (the console was restarted, or the page is older than 12 hours): reload the page and try again"
    }
}

fn asset(content_type: &'static str, body: &'static str) -> Answer {
    let mut r = answer(StatusCode::OK, content_type, body);
    r.headers_mut()
        .insert(CACHE_CONTROL, HeaderValue::from_static("max-age=300"));
    r
}

async fn login(
    app: &App,
    method: &Method,
    form: &Params,
    origin: Option<&str>,
    host: Option<&str>,
    peer: SocketAddr,
) -> Answer {
    let Some(password) = &app.password else {
        return redirect(&app.at("/"));
    };
    if *method != Method::POST {
        return html(StatusCode::OK, pages::layout::login(&app.base, None));
    }
    if origin.is_some_and(|o| !auth::same_origin(o, host)) {
        app.metrics.action("sign_in", Outcome::Refused);
        return plain(StatusCode::FORBIDDEN, "refused: cross-site sign-in");
    }
    let given = form
        .0
        .iter()
        .find(|(k, _)| k == "password")
        .map(|(_, v)| v.as_str())
        .unwrap_or("");
    let client = Client::of(peer.ip());
    if let Verdict::Wait(wait) = lock(&app.throttle).attempt(Instant::now(), client) {
        app.metrics.action("sign_in", Outcome::Refused);
        note_failure(app, client, Failure::Refused);
        return too_many(app, wait);
    }
    if !auth::ct_eq(given.as_bytes(), password.as_bytes()) {
        app.metrics.action("sign_in", Outcome::Refused);
        note_failure(app, client, Failure::Wrong);
        // Slows guessing down; the answer is the same whatever was wrong.
        tokio::time::sleep(Duration::from_millis(300)).await;
        return html(
            StatusCode::UNAUTHORIZED,
            pages::layout::login(&app.base, Some("Wrong password.")),
        );
    }
    lock(&app.throttle).succeeded(client);
    let (id, _) = app.sessions.open(true, true);
    tracing::warn!(%peer, "console sign-in");
    app.metrics.action("sign_in", Outcome::Changed);
    set_cookie(app, redirect(&app.at("/")), &id, None)
}

fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Counts a failed sign-in; the first of a window schedules the window's
/// one log line.
fn note_failure(app: &App, client: Client, failure: Failure) {
    if !lock(&app.tally).note(Instant::now(), client, failure) {
        return;
    }
    let tally = app.tally.clone();
    tokio::spawn(async move {
        tokio::time::sleep(TALLY_WINDOW).await;
        let summary = lock(&tally).take(Instant::now());
        if let Some(s) = summary {
            tracing::warn!(
                wrong = s.wrong,
                refused = s.refused,
                "console sign-ins failed: {s}"
            );
        }
    });
}

/// 429 to a client that must wait before its next sign-in, with when in
/// `Retry-After` and on the page.
fn too_many(app: &App, wait: Duration) -> Answer {
    let secs = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
    let secs = secs.max(1);
    let why = format!("Too many sign-in attempts from your address: try again in {secs} s.");
    let mut r = html(
        StatusCode::TOO_MANY_REQUESTS,
        pages::layout::login(&app.base, Some(&why)),
    );
    r.headers_mut().insert(RETRY_AFTER, HeaderValue::from(secs));
    r
}

async fn get(app: &App, path: &str, query: &Params, sid: &str, view: &View) -> Answer {
    let flash = app.sessions.take_flash(sid);
    match path {
        "/" => match app.store.overview().await {
            Ok(o) => html(
                StatusCode::OK,
                pages::overview::overview(view, &o, flash.as_deref()),
            ),
            Err(e) => failed(view, e),
        },
        "/overview.json" => match app.store.overview().await {
            Ok(o) => {
                let map: serde_json::Map<String, serde_json::Value> = pages::overview::figures(&o)
                    .into_iter()
                    .map(|(k, v)| (k.to_owned(), v.into()))
                    .collect();
                answer(
                    StatusCode::OK,
                    "application/json",
                    serde_json::Value::Object(map).to_string(),
                )
            }
            Err(e) => plain(StatusCode::INTERNAL_SERVER_ERROR, &failure_text(&e)),
        },
        "/stuck" => match app.store.stuck_list(STUCK_LIMIT).await {
            Ok(rows) => html(
                StatusCode::OK,
                pages::overview::stuck(view, &rows, STUCK_LIMIT),
            ),
            Err(e) => failed(view, e),
        },
        "/events" => events(app, query, view).await,
        "/dead-letters" => {
            let result = forms::dead_letter_filter(query)
                .and_then(|s| Ok((s, forms::error_text(query)?, forms::after(query)?)));
            let page = match result {
                Ok((selector, error, after)) => match app
                    .store
                    .dead_letter_page(&selector, error.as_deref(), after, PAGE_SIZE)
                    .await
                {
                    Ok(p) => Ok(p),
                    Err(e) => return failed(view, e),
                },
                Err(e) => Err(e),
            };
            let status = if page.is_ok() {
                StatusCode::OK
            } else {
                StatusCode::BAD_REQUEST
            };
            html(
                status,
                pages::dead_letters::list(view, query, page, flash.as_deref()),
            )
        }
        _ => match path.strip_prefix("/events/").map(Uuid::parse_str) {
            Some(Ok(id)) => match app.store.event_get(id).await {
                Ok(Some(e)) => {
                    let trace = trace_link(app.trace_link.as_deref(), &e.headers);
                    html(StatusCode::OK, pages::events::detail(view, &e, trace))
                }
                Ok(None) => html(
                    StatusCode::NOT_FOUND,
                    pages::layout::page(
                        view,
                        "Not found",
                        "/events",
                        maud::html! { p { "No event has this id (delivered events are deleted unless the relay keeps them)." } },
                    ),
                ),
                Err(e) => failed(view, e),
            },
            _ => plain(StatusCode::NOT_FOUND, "not found"),
        },
    }
}

async fn events(app: &App, query: &Params, view: &View) -> Answer {
    match forms::event_id(query) {
        Ok(Some(id)) => return redirect(&app.at(&format!("/events/{id}"))),
        Ok(None) => {}
        Err(e) => {
            return html(
                StatusCode::BAD_REQUEST,
                pages::events::search(view, query, Err(e)),
            )
        }
    }
    let q = match forms::event_query(query) {
        Ok(q) => q,
        Err(e) => {
            return html(
                StatusCode::BAD_REQUEST,
                pages::events::search(view, query, Err(e)),
            )
        }
    };
    let searching = q.aggregate_type.is_some()
        || q.aggregate_id.is_some()
        || q.event_type.is_some()
        || q.from.is_some()
        || q.to.is_some()
        || q.state.is_some()
        || q.after > 0;
    if !searching {
        return html(StatusCode::OK, pages::events::search(view, query, Ok(None)));
    }
    match app.store.event_search(&q, PAGE_SIZE).await {
        Ok(found) => html(
            StatusCode::OK,
            pages::events::search(view, query, Ok(Some(found))),
        ),
        Err(e) => failed(view, e),
    }
}

/// The trace link of an event whose headers hold a W3C `traceparent`.
fn trace_link(template: Option<&str>, headers: &str) -> Option<String> {
    let template = template?;
    let map: serde_json::Map<String, serde_json::Value> = serde_json::from_str(headers).ok()?;
    let tp = map.get("traceparent")?.as_str()?;
    let trace_id = tp.split('-').nth(1)?;
    let ok = trace_id.len() == 32 && trace_id.bytes().all(|b| b.is_ascii_hexdigit());
    ok.then(|| template.replace("{trace_id}", trace_id))
}

#[allow(clippy::too_many_arguments)]
async fn post(
    app: &App,
    path: &str,
    form: &Params,
    sid: &str,
    session: &Session,
    origin: Option<&str>,
    host: Option<&str>,
    view: &View,
    peer: SocketAddr,
) -> Answer {
    let refused = || {
        app.metrics
            .action(action_of(path, form.get("action")), Outcome::Refused)
    };
    match auth::check_post(Some(session), form.get("csrf"), origin, host) {
        Ok(()) => {}
        Err(Refusal::NotSignedIn) => {
            refused();
            return plain(StatusCode::FORBIDDEN, not_signed_in(app));
        }
        Err(Refusal::Csrf) => {
            refused();
            tracing::warn!(%peer, path, "console POST refused: missing or wrong CSRF token, or cross-site");
            return plain(StatusCode::FORBIDDEN, "refused: this form is stale or came from another site; reload the page and try again");
        }
    }
    if path == "/logout" {
        app.sessions.close(sid);
        app.metrics.action("sign_out", Outcome::Changed);
        let to = if app.password.is_some() {
            "/login"
        } else {
            "/"
        };
        return set_cookie(app, redirect(&app.at(to)), "", Some(0));
    }
    if app.read_only {
        refused();
        return plain(StatusCode::FORBIDDEN, "refused: the console runs read-only");
    }
    super::actions::run(app, path, form, sid, view, peer).await
}

#[cfg(test)]
mod tests {
    use super::{own_path, Unsigned};
    use http::Method;

    #[test]
    fn without_a_session_only_a_get_opens_one_or_signs_in() {
        assert_eq!(Unsigned::of(false, &Method::GET), Unsigned::Open);
        assert_eq!(Unsigned::of(true, &Method::GET), Unsigned::SignIn);
        assert_eq!(Unsigned::of(false, &Method::POST), Unsigned::Refuse);
        assert_eq!(Unsigned::of(true, &Method::POST), Unsigned::Refuse);
        assert_eq!(Unsigned::of(false, &Method::HEAD), Unsigned::Refuse);
    }

    #[test]
    fn the_base_path_is_stripped_and_nothing_outside_it_is_the_consoles() {
        assert_eq!(own_path("", "/events"), Some("/events"));
        assert_eq!(own_path("/outbox", "/outbox/events/x"), Some("/events/x"));
        assert_eq!(own_path("/outbox", "/outbox/"), Some("/"));
        assert_eq!(own_path("/outbox", "/outbox"), Some("/"));
        assert_eq!(own_path("/outbox", "/outboxes"), None);
        assert_eq!(own_path("/outbox", "/events"), None);
    }
}
