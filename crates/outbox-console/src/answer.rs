//! What every console route shares: the application state ([`App`]) and
//! the answers it gives, each with the console's security headers (a
//! strict CSP, no framing, no sniffing, no caching).

use bytes::Bytes;
use http::header::{HeaderValue, CACHE_CONTROL, CONTENT_TYPE, LOCATION};
use http::{Response, StatusCode};
use http_body_util::Full;
use maud::Markup;
use outbox::redact::redact_text;

use super::auth::Sessions;
use super::pages::{self, View};
use super::store::Store;

/// No inline script or style, nothing from elsewhere, no framing.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; \
                   connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

pub(crate) type Answer = Response<Full<Bytes>>;

/// Everything the routes share.
pub struct App {
    pub store: Store,
    pub sessions: Sessions,
    pub password: Option<String>,
    pub read_only: bool,
    pub schema: String,
    /// The relays' wake-up channel, notified after a resume or a retry.
    pub channel: String,
    /// `{trace_id}` URL template for the event page.
    pub trace_link: Option<String>,
    /// The path the console is served under: `""`, or `/outbox` (no
    /// trailing `/`), which every link, form, redirect and cookie carries.
    pub base: String,
    /// The actions counted, served at `/metrics`.
    pub metrics: super::metrics::ConsoleMetrics,
    /// Who may try a password now.
    pub throttle: std::sync::Mutex<super::throttle::Throttle>,
    /// Failed sign-ins since the last summary in the log.
    pub tally: std::sync::Arc<std::sync::Mutex<super::throttle::Tally>>,
}

impl App {
    /// The console's own `path` (`/events`) as the browser reaches it.
    pub fn at(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }
}

fn with_headers(mut r: Answer) -> Answer {
    let h = r.headers_mut();
    h.insert("content-security-policy", HeaderValue::from_static(CSP));
    h.insert(
        "x-content-type-options",
        HeaderValue::from_static("nosniff"),
    );
    // `same-origin`, not `no-referrer`: with the latter browsers send
    // `Origin: null` on the console's own form posts, which the CSRF check
    // must refuse.
    h.insert("referrer-policy", HeaderValue::from_static("same-origin"));
    h.insert("x-frame-options", HeaderValue::from_static("DENY"));
    if !h.contains_key(CACHE_CONTROL) {
        h.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    }
    r
}

pub(super) fn answer(
    status: StatusCode,
    content_type: &'static str,
    body: impl Into<Bytes>,
) -> Answer {
    let mut r = Response::new(Full::new(body.into()));
    *r.status_mut() = status;
    r.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    with_headers(r)
}

pub(super) fn html(status: StatusCode, page: Markup) -> Answer {
    answer(status, "text/html; charset=utf-8", page.into_string())
}

/// 303 to `to`, a path the base path already prefixes.
pub(super) fn redirect(to: &str) -> Answer {
    let mut r = answer(StatusCode::SEE_OTHER, "text/plain; charset=utf-8", "");
    if let Ok(v) = HeaderValue::from_str(to) {
        r.headers_mut().insert(LOCATION, v);
    }
    r
}

/// `e` as the console shows it: `doing X: the database's message`, each
/// cause once, the URL's password redacted.
pub(super) fn failure_text(e: &anyhow::Error) -> String {
    redact_text(&error_chain(e))
}

/// `error` and its causes on one line (`a: b: c`), a cause left out when
/// the line already ends with its text: the driver's database errors
/// repeat their message as their own cause ("timestamp out of range:
/// timestamp out of range"). The console's failure pages and the `outbox`
/// program's error lines both say an error this way.
pub fn error_chain(error: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in error.chain() {
        let text = cause.to_string();
        if out.is_empty() {
            out = text;
        } else if !out.ends_with(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
    }
    out
}

pub(super) fn plain(status: StatusCode, text: &str) -> Answer {
    answer(status, "text/plain; charset=utf-8", format!("{text}\n"))
}

/// A database failure as a page, the URL's password redacted: what was
/// being done, then the database's message once (the driver repeats it as
/// its own cause).
pub(super) fn failed(view: &View, e: anyhow::Error) -> Answer {
    let text = failure_text(&e);
    tracing::warn!(error = %text, "console read failed");
    html(
        StatusCode::INTERNAL_SERVER_ERROR,
        pages::layout::page(view, "Error", "", maud::html! { p.error { (text) } }),
    )
}

#[cfg(test)]
mod tests {
    use super::error_chain;

    #[test]
    fn a_cause_that_repeats_the_message_is_said_once() {
        #[derive(Debug)]
        struct Inner;
        impl std::fmt::Display for Inner {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("timestamp out of range")
            }
        }
        impl std::error::Error for Inner {}
        #[derive(Debug)]
        struct Outer(Inner);
        impl std::fmt::Display for Outer {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("error returned from database: timestamp out of range")
            }
        }
        impl std::error::Error for Outer {
            fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
                Some(&self.0)
            }
        }
        let e = anyhow::Error::new(Outer(Inner)).context("database error during cleanup");
        assert_eq!(
            error_chain(&e),
            "database error during cleanup: error returned from database: timestamp out of range"
        );
    }
}
