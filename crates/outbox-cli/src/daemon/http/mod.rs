//! The relay's HTTP endpoints: `GET /metrics` (Prometheus, OpenMetrics text
//! format), `GET /healthz` (the process is alive) and `GET /readyz` (the
//! relay can work; 503 with what is wrong otherwise); with `outbox relay
//! --console`, the web console on every other path. Its accept loop
//! ([`accept_loop`]) serves `outbox console` too.

mod ready;
mod ready_sources;

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::header::{HeaderValue, CONTENT_TYPE};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::{oneshot, Notify};
use tokio::task::JoinHandle;

pub use ready::{Readiness, RelayState};
pub use ready_sources::SourcesReadiness;

/// `/readyz`'s checks: of the relay of one source, or of many.
pub enum Ready {
    /// One database and schema.
    One(Readiness),
    /// `[[source]]` entries.
    Sources(SourcesReadiness),
}

impl Ready {
    async fn check(&self) -> (bool, serde_json::Value) {
        match self {
            Ready::One(r) => r.check().await,
            Ready::Sources(r) => r.check().await,
        }
    }
}

use crate::daemon::metrics::Metrics;

/// Connections kept open at once. At the cap, a new connection closes the
/// one that has waited longest for a request head (idle, slow, or not
/// reading its answer), so such clients cannot lock `/healthz` and `/readyz`
/// out; only while every connection is in the middle of a request does a new
/// one wait to be accepted.
const MAX_CONNECTIONS: usize = 256;

/// How long a client may take to send a request head, on a new connection
/// or between requests on a kept-alive one. Probes send theirs at once.
const HEADER_TIMEOUT: Duration = Duration::from_secs(2);

/// Pause after a failed accept (out of file descriptors): the error is not
/// retried in a busy loop.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// What the endpoints serve.
pub struct App {
    /// `/metrics`.
    pub metrics: Arc<Metrics>,
    /// `/readyz`.
    pub readiness: Ready,
    /// This relay's instance id, shown by `/healthz`.
    pub instance: String,
    /// When the process started.
    pub started: Instant,
    /// What answers every other path (the web console, `--console`).
    pub console: Option<Arc<dyn Mounted>>,
}

/// What a command mounts beside the endpoints to answer every other path
/// (the web console, with `--console`): the command composing the process
/// hands it in, so the endpoints know no page of it.
#[async_trait::async_trait]
pub trait Mounted: Send + Sync {
    /// The answer to `req` from `peer`.
    async fn answer(&self, req: Request<Incoming>, peer: SocketAddr) -> Response<Full<Bytes>>;
    /// Its own counters, in OpenMetrics text (ending `# EOF`), which the
    /// relay's `/metrics` serves after its own.
    fn metrics(&self) -> String;
}

/// Serves `app` on `listener` until the task is aborted.
pub fn serve(listener: TcpListener, app: Arc<App>) -> JoinHandle<()> {
    tokio::spawn(accept_loop(listener, move |req, peer| {
        let app = app.clone();
        async move { route(&app, req, peer).await }
    }))
}

/// Accepts connections on `listener` and answers each request on them with
/// `respond`, forever: the one server of the process, with one set of
/// limits, behind the relay's endpoints and `outbox console` alike.
/// At most [`MAX_CONNECTIONS`] are kept open; a request head must arrive
/// within [`HEADER_TIMEOUT`].
pub async fn accept_loop<R, F>(listener: TcpListener, respond: R)
where
    R: Fn(Request<Incoming>, SocketAddr) -> F + Clone + Send + Sync + 'static,
    F: std::future::Future<Output = Response<Full<Bytes>>> + Send + 'static,
{
    let open = Arc::new(Connections::default());
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(error = %e, "http accept failed");
                tokio::time::sleep(ACCEPT_BACKOFF).await;
                continue;
            }
        };
        open.make_room(MAX_CONNECTIONS).await;
        let (id, evicted) = open.insert();
        let (respond, open_) = (respond.clone(), open.clone());
        tokio::spawn(async move {
            let open = open_;
            let service = hyper::service::service_fn(|req| {
                let (respond, open) = (respond.clone(), open.clone());
                async move {
                    open.set_waiting(id, false);
                    let response = respond(req, peer).await;
                    open.set_waiting(id, true);
                    Ok::<_, Infallible>(response)
                }
            });
            let conn = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(HEADER_TIMEOUT)
                .serve_connection(TokioIo::new(stream), service);
            tokio::select! {
                ended = conn => if let Err(e) = ended {
                    tracing::debug!(%peer, error = %e, "http connection ended with an error");
                },
                _ = evicted => {
                    tracing::debug!(%peer, "http connection closed to make room for a new one");
                }
            }
            open.remove(id);
        });
        // The new connection reads its request head before more are
        // accepted (and could push it out as the oldest waiting).
        tokio::task::yield_now().await;
    }
}

/// The open connections, and since when each has waited for a request head
/// (`None` while a request is being answered).
#[derive(Default)]
struct Connections {
    table: std::sync::Mutex<Table>,
    /// A connection ended.
    freed: Notify,
}

#[derive(Default)]
struct Table {
    next_id: u64,
    open: HashMap<u64, Slot>,
}

struct Slot {
    waiting_since: Option<Instant>,
    /// Dropping it closes the connection.
    _close: oneshot::Sender<()>,
}

impl Connections {
    fn lock(&self) -> std::sync::MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A new connection, waiting for its request head; the receiver
    /// completes when it is to be closed.
    fn insert(&self) -> (u64, oneshot::Receiver<()>) {
        let (close, closed) = oneshot::channel();
        let mut t = self.lock();
        let id = t.next_id;
        t.next_id += 1;
        t.open.insert(
            id,
            Slot {
                waiting_since: Some(Instant::now()),
                _close: close,
            },
        );
        (id, closed)
    }

    fn set_waiting(&self, id: u64, waiting: bool) {
        if let Some(slot) = self.lock().open.get_mut(&id) {
            slot.waiting_since = waiting.then(Instant::now);
        }
    }

    fn remove(&self, id: u64) {
        if self.lock().open.remove(&id).is_some() {
            self.freed.notify_one();
        }
    }

    /// Returns once fewer than `cap` connections are open, closing the one
    /// that has waited longest for a request head if need be.
    async fn make_room(&self, cap: usize) {
        loop {
            let freed = self.freed.notified();
            {
                let mut t = self.lock();
                if t.open.len() < cap {
                    return;
                }
                let oldest = t
                    .open
                    .iter()
                    .filter_map(|(id, slot)| Some((slot.waiting_since?, *id)))
                    .min();
                if let Some((_, id)) = oldest {
                    // Dropping its sender closes it.
                    t.open.remove(&id);
                    return;
                }
            }
            // Every connection is answering a request: wait for one to end.
            freed.await;
        }
    }
}

fn response(status: StatusCode, content_type: &'static str, body: String) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = status;
    r.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    r
}

fn json(status: StatusCode, body: serde_json::Value) -> Response<Full<Bytes>> {
    response(status, "application/json", format!("{body}\n"))
}

async fn route(app: &App, req: Request<Incoming>, peer: SocketAddr) -> Response<Full<Bytes>> {
    let path = req.uri().path();
    if let Some(console) = &app.console {
        if !matches!(path, "/metrics" | "/healthz" | "/readyz") {
            return console.answer(req, peer).await;
        }
    }
    if !matches!(path, "/metrics" | "/healthz" | "/readyz") {
        return json(
            StatusCode::NOT_FOUND,
            serde_json::json!({"error": "not found: use /metrics, /healthz or /readyz"}),
        );
    }
    if req.method() != Method::GET && req.method() != Method::HEAD {
        let mut r = json(
            StatusCode::METHOD_NOT_ALLOWED,
            serde_json::json!({"error": "use GET"}),
        );
        r.headers_mut()
            .insert(hyper::header::ALLOW, HeaderValue::from_static("GET, HEAD"));
        return r;
    }
    match path {
        "/metrics" => {
            let mut text = app.metrics.encode();
            // The console's counters in the same exposition (one `# EOF`).
            if let Some(console) = &app.console {
                if let Some(body) = text.strip_suffix("# EOF\n") {
                    text = format!("{body}{}", console.metrics());
                }
            }
            response(StatusCode::OK, OPENMETRICS, text)
        }
        "/healthz" => json(
            StatusCode::OK,
            serde_json::json!({
                "status": "alive",
                "instance": app.instance,
                "uptime_seconds": app.started.elapsed().as_secs(),
            }),
        ),
        _ => {
            let (ready, body) = app.readiness.check().await;
            let status = if ready {
                StatusCode::OK
            } else {
                StatusCode::SERVICE_UNAVAILABLE
            };
            json(status, body)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::sync::oneshot::error::TryRecvError;

    #[tokio::test]
    async fn at_the_cap_the_connection_waiting_longest_is_closed_never_a_busy_one() {
        let open = Connections::default();
        let (busy, mut busy_closed) = open.insert();
        let (_, mut oldest_closed) = open.insert();
        let (_, mut newest_closed) = open.insert();
        open.set_waiting(busy, false);

        open.make_room(3).await;
        assert_eq!(oldest_closed.try_recv(), Err(TryRecvError::Closed));
        assert_eq!(busy_closed.try_recv(), Err(TryRecvError::Empty));
        assert_eq!(newest_closed.try_recv(), Err(TryRecvError::Empty));

        // Below the cap nothing is closed.
        open.make_room(3).await;
        assert_eq!(newest_closed.try_recv(), Err(TryRecvError::Empty));
    }

    #[tokio::test]
    async fn when_every_connection_is_busy_a_new_one_waits_for_one_to_end() {
        let open = Connections::default();
        let (a, mut a_closed) = open.insert();
        let (b, _) = open.insert();
        open.set_waiting(a, false);
        open.set_waiting(b, false);
        let waited = tokio::time::timeout(Duration::from_millis(100), open.make_room(2)).await;
        assert!(waited.is_err(), "made room by closing a busy connection");
        assert_eq!(a_closed.try_recv(), Err(TryRecvError::Empty));

        open.remove(b);
        tokio::time::timeout(Duration::from_secs(5), open.make_room(2))
            .await
            .expect("room once a connection ended");
        assert_eq!(a_closed.try_recv(), Err(TryRecvError::Empty));
    }
}
