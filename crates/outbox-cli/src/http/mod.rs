//! The relay's HTTP endpoints: `GET /metrics` (Prometheus, OpenMetrics text
//! format), `GET /healthz` (the process is alive) and `GET /readyz` (the
//! relay can work; 503 with what is wrong otherwise).

mod ready;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::header::{HeaderValue, CONTENT_TYPE};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio::task::JoinHandle;

pub use ready::{DbProbe, Readiness, RelayState};

use crate::metrics::Metrics;

/// Connections served at once; more wait to be accepted.
const MAX_CONNECTIONS: usize = 64;

/// How long a client may take to send its request head.
const HEADER_TIMEOUT: Duration = Duration::from_secs(10);

const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// What the endpoints serve.
pub struct App {
    /// `/metrics`.
    pub metrics: Arc<Metrics>,
    /// `/readyz`.
    pub readiness: Readiness,
    /// This relay's instance id, shown by `/healthz`.
    pub instance: String,
    /// When the process started.
    pub started: Instant,
}

/// Binds `addr` (`HOST:PORT`).
pub async fn bind(addr: &str) -> Result<TcpListener> {
    TcpListener::bind(addr)
        .await
        .with_context(|| format!("cannot listen on {addr}"))
}

/// Serves `app` on `listener` until the task is aborted.
pub fn serve(listener: TcpListener, app: Arc<App>) -> JoinHandle<()> {
    tokio::spawn(async move {
        let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
        loop {
            let Ok(permit) = slots.clone().acquire_owned().await else {
                return;
            };
            let (stream, peer) = match listener.accept().await {
                Ok(s) => s,
                Err(e) => {
                    tracing::warn!(error = %e, "http accept failed");
                    continue;
                }
            };
            let app = app.clone();
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |req| {
                    let app = app.clone();
                    async move { Ok::<_, Infallible>(route(&app, req).await) }
                });
                let conn = hyper::server::conn::http1::Builder::new()
                    .timer(TokioTimer::new())
                    .header_read_timeout(HEADER_TIMEOUT)
                    .serve_connection(TokioIo::new(stream), service);
                if let Err(e) = conn.await {
                    tracing::debug!(%peer, error = %e, "http connection ended with an error");
                }
                drop(permit);
            });
        }
    })
}

/// The address a listener is bound to, for logs.
pub fn local_addr(listener: &TcpListener) -> Option<SocketAddr> {
    listener.local_addr().ok()
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

async fn route(app: &App, req: Request<Incoming>) -> Response<Full<Bytes>> {
    let path = req.uri().path();
    if !matches!(path, "/metrics" | "/healthz" | "/readyz") {
        return json(
            StatusCode::NOT_FOUND,
            serde_json::json!({"error": "not found: use /metrics, /healthz or /readyz"}),
        );
    }
    if req.method() != Method::GET && req.method() != Method::HEAD {
        return json(
            StatusCode::METHOD_NOT_ALLOWED,
            serde_json::json!({"error": "use GET"}),
        );
    }
    match path {
        "/metrics" => response(StatusCode::OK, OPENMETRICS, app.metrics.encode()),
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
