//! The outbox's web console as a library: server-rendered pages for the
//! people on call (overview, stuck aggregates, events, dead letters, pause
//! and resume) over a pool and a schema. `outbox console` and `outbox relay
//! --console` serve it; a service of your own mounts it on its server,
//! under a path of its choosing (docs/console.md).
//!
//! Who may use it, and how, comes with it: the password and the sessions
//! behind an `HttpOnly`, `SameSite=Strict` cookie, sign-in throttling per
//! client address, a CSRF token in every form, a strict
//! Content-Security-Policy and no framing on every answer; without a
//! password it answers only to a loopback `Host`.
//!
//! ```no_run
//! # async fn mount(pool: sqlx::PgPool) -> Result<(), Box<dyn std::error::Error>> {
//! let console = outbox_console::Console::builder(pool, &outbox::Schema::default())
//!     .password(std::env::var("OUTBOX_CONSOLE_PASSWORD")?)
//!     .base_path("/outbox")
//!     .build()?;
//! # #[cfg(feature = "axum")]
//! let app: axum::Router = axum::Router::new()
//!     .route("/", axum::routing::get(|| async { "my service" }))
//!     .merge(console.router());
//! # Ok(()) }
//! ```
#![forbid(unsafe_code)]
#![deny(missing_docs)]

mod actions;
mod answer;
mod auth;
mod count;
mod delivery;
mod forms;
mod json_pretty;
mod metrics;
mod pages;
mod queries;
mod rate;
mod selection;
mod server;
mod store;
mod throttle;

use std::net::SocketAddr;
use std::sync::Arc;

pub use answer::error_chain;
pub use auth::is_mapped_loopback;
pub use delivery::slot_line;

/// What the console answers: a whole body, its security headers set.
pub type Response = http::Response<http_body_util::Full<bytes::Bytes>>;

/// The console of one schema over one pool, ready to answer requests. A
/// cheap handle: clones share the sessions, the sign-in throttle and the
/// counters.
#[derive(Clone)]
pub struct Console {
    app: Arc<answer::App>,
}

/// How a [`Console`] is set up: [`Console::builder`].
#[must_use]
pub struct ConsoleBuilder {
    pool: sqlx::PgPool,
    schema: outbox::Schema,
    password: Option<String>,
    read_only: bool,
    trace_link: Option<String>,
    base_path: String,
}

/// Why a [`ConsoleBuilder`] could not build its console.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BuildError(String);

impl std::fmt::Display for BuildError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for BuildError {}

impl Console {
    /// A console of `schema` over `pool`: no password (loopback only),
    /// read-write, served at the root of its server until
    /// [`ConsoleBuilder::base_path`] says otherwise. The pool's
    /// connections are the console's reads and actions; give it a pool of
    /// its own (two connections are plenty) so it never waits behind the
    /// service's work.
    pub fn builder(pool: sqlx::PgPool, schema: &outbox::Schema) -> ConsoleBuilder {
        ConsoleBuilder {
            pool,
            schema: schema.clone(),
            password: None,
            read_only: false,
            trace_link: None,
            base_path: String::new(),
        }
    }

    /// The answer to `req`, sent by `peer` (whose address the sign-in
    /// throttle counts). `req`'s path is the whole path, the base path
    /// included: paths outside it are answered 404.
    pub async fn handle<B>(&self, req: http::Request<B>, peer: SocketAddr) -> Response
    where
        B: http_body::Body,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        server::answer_request(&self.app, req, peer).await
    }

    /// The console's own counters (`outbox_console_actions_total`), in
    /// OpenMetrics text ending `# EOF`: also served at `<base>/metrics`.
    pub fn metrics(&self) -> String {
        self.app.metrics.encode()
    }

    /// The path the console is served under (`""` at the root).
    pub fn base_path(&self) -> &str {
        &self.app.base
    }

    /// The console as an axum `Router` answering its base path and
    /// everything under it, to [`merge`](axum::Router::merge) into a
    /// service's router (not `nest`: the console reads the whole path).
    /// Serve the service with
    /// `into_make_service_with_connect_info::<SocketAddr>()` so the sign-in
    /// throttle sees each client's address; without it every client counts
    /// as one.
    #[cfg(feature = "axum")]
    pub fn router<S>(&self) -> axum::Router<S>
    where
        S: Clone + Send + Sync + 'static,
    {
        use axum::extract::{ConnectInfo, Request};

        let console = self.clone();
        let handler = move |req: Request| {
            let console = console.clone();
            async move {
                let peer = req
                    .extensions()
                    .get::<ConnectInfo<SocketAddr>>()
                    .map(|c| c.0)
                    .unwrap_or_else(|| SocketAddr::from(([0, 0, 0, 0], 0)));
                console.handle(req, peer).await
            }
        };
        let base = &self.app.base;
        let (root, rest) = if base.is_empty() {
            ("/".to_owned(), "/{*rest}".to_owned())
        } else {
            (base.clone(), format!("{base}/{{*rest}}"))
        };
        let mut router = axum::Router::new()
            .route(&root, axum::routing::any(handler.clone()))
            .route(&rest, axum::routing::any(handler.clone()));
        if !base.is_empty() {
            router = router.route(&format!("{base}/"), axum::routing::any(handler));
        }
        router
    }
}

impl ConsoleBuilder {
    /// The password every browser must give before it sees anything (and
    /// without which the console answers only to a loopback `Host`).
    pub fn password(mut self, password: impl Into<String>) -> Self {
        self.password = Some(password.into());
        self
    }

    /// Show everything, change nothing: no action buttons, every POST but
    /// sign-in and sign-out refused.
    pub fn read_only(mut self, read_only: bool) -> Self {
        self.read_only = read_only;
        self
    }

    /// A link for an event's trace: an http(s) URL holding `{trace_id}`,
    /// replaced by the trace id of the event's `traceparent` header (e.g.
    /// `http://jaeger:16686/trace/{trace_id}`).
    pub fn trace_link(mut self, template: impl Into<String>) -> Self {
        self.trace_link = Some(template.into());
        self
    }

    /// The path the console is mounted at, e.g. `/outbox`: its links,
    /// forms, redirects, assets and cookie all carry it. Letters, digits
    /// and `-._~` in `/`-separated segments; `/` (the default) is the root.
    pub fn base_path(mut self, path: impl Into<String>) -> Self {
        self.base_path = path.into();
        self
    }

    /// The console, or why its settings cannot be served.
    pub fn build(self) -> Result<Console, BuildError> {
        if self.password.as_deref() == Some("") {
            return Err(BuildError(
                "the console password is empty: set a non-empty one".into(),
            ));
        }
        if let Some(t) = &self.trace_link {
            if !(t.starts_with("https://") || t.starts_with("http://")) || !t.contains("{trace_id}")
            {
                return Err(BuildError(
                    "the trace link must be an http(s) URL holding {trace_id}".into(),
                ));
            }
        }
        let base = base_path(&self.base_path).map_err(BuildError)?;
        Ok(Console {
            app: Arc::new(answer::App {
                store: store::Store::new(self.pool, &self.schema),
                sessions: auth::Sessions::default(),
                password: self.password,
                read_only: self.read_only,
                schema: self.schema.name().to_owned(),
                channel: self.schema.channel(),
                trace_link: self.trace_link,
                base,
                metrics: metrics::ConsoleMetrics::default(),
                throttle: Default::default(),
                tally: Default::default(),
            }),
        })
    }
}

/// `path` as the console prefixes its own paths with: `""` for the root,
/// else `/seg/…` without a trailing `/`.
fn base_path(path: &str) -> Result<String, String> {
    let trimmed = path.trim_end_matches('/');
    if trimmed.is_empty() {
        return if path.is_empty() || path.starts_with('/') {
            Ok(String::new())
        } else {
            Err(format!("base path {path:?} must start with /"))
        };
    }
    let Some(rest) = trimmed.strip_prefix('/') else {
        return Err(format!(
            "base path {path:?} must start with /, e.g. /outbox"
        ));
    };
    for segment in rest.split('/') {
        let fine = !segment.is_empty()
            && segment != "."
            && segment != ".."
            && segment
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-._~".contains(&b));
        if !fine {
            return Err(format!(
                "base path {path:?}: use letters, digits and -._~ between single slashes, e.g. /outbox"
            ));
        }
    }
    Ok(trimmed.to_owned())
}

#[cfg(test)]
mod tests {
    use super::base_path;

    #[test]
    fn base_paths_are_plain_segments_without_a_trailing_slash() {
        assert_eq!(base_path("").unwrap(), "");
        assert_eq!(base_path("/").unwrap(), "");
        assert_eq!(base_path("/outbox").unwrap(), "/outbox");
        assert_eq!(base_path("/outbox/").unwrap(), "/outbox");
        assert_eq!(base_path("/ops/outbox-1").unwrap(), "/ops/outbox-1");
        for bad in [
            "outbox", "//outbox", "/a//b", "/a/../b", "/out box", "/a?b", "/a;b", "/a\"b",
        ] {
            assert!(base_path(bad).is_err(), "{bad}");
        }
    }
}
