//! The webhook receiver of `bench e2e --publisher http`: a hyper server in
//! the bench's process, so the receiver is not what is measured (a
//! scripting-language server caps near 40 requests/s here). Every request
//! body goes to the current run's [`Arrivals`] for its path (the relay's and
//! the reference's are apart) before it is answered `204`: the answer is
//! the acknowledgement.
//!
//! With [`Slow`], every N-th request is answered late, as a real
//! endpoint's slow tail is: the relay and the reference meet the same one.
//!
//! Signatures are not verified here; the webhook tests do that.

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use anyhow::{Context, Result};
use http_body_util::{BodyExt, Empty};
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

use super::check::Arrivals;

/// Where the receiver puts what it gets: the current run's arrivals, by
/// request path.
type Sink = Arc<Mutex<HashMap<String, Arc<Arrivals>>>>;

/// Every `every`-th request (0: none) is answered after `wait`.
#[derive(Debug, Clone, Copy)]
pub struct Slow {
    pub every: u64,
    pub wait: std::time::Duration,
}

/// A running receiver; stopped on drop.
pub struct Receiver {
    addr: SocketAddr,
    sink: Sink,
    task: JoinHandle<()>,
}

impl Receiver {
    /// Listens on a free port of 127.0.0.1.
    pub async fn start(slow: Slow) -> Result<Receiver> {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .context("cannot listen for the webhook receiver")?;
        let addr = listener.local_addr()?;
        let sink: Sink = Arc::default();
        let task = tokio::spawn(serve(listener, sink.clone(), slow));
        if slow.every > 0 {
            eprintln!(
                "bench e2e: webhook receiver on http://{addr}, every {}th request answered after {} ms",
                slow.every,
                slow.wait.as_millis()
            );
        } else {
            eprintln!("bench e2e: webhook receiver on http://{addr}");
        }
        Ok(Receiver { addr, sink, task })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// From now on, bodies sent to `path` go to `arrivals`.
    pub fn deliver_to(&self, path: &str, arrivals: Arc<Arrivals>) {
        self.sink
            .lock()
            .expect("lock")
            .insert(path.to_owned(), arrivals);
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn serve(listener: TcpListener, sink: Sink, slow: Slow) {
    let count = Arc::new(std::sync::atomic::AtomicU64::new(0));
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            continue;
        };
        let _ = stream.set_nodelay(true);
        let (sink, count) = (sink.clone(), count.clone());
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req| {
                let n = count.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
                let late = slow.every > 0 && n % slow.every == 0;
                receive(req, sink.clone(), late.then_some(slow.wait))
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

async fn receive(
    req: Request<Incoming>,
    sink: Sink,
    late: Option<std::time::Duration>,
) -> Result<Response<Empty<Bytes>>, Infallible> {
    if let Some(wait) = late {
        tokio::time::sleep(wait).await;
    }
    let path = req.uri().path().to_owned();
    let status = match req.into_body().collect().await {
        Ok(body) => {
            let body = body.to_bytes();
            let arrivals = sink.lock().expect("lock").get(&path).cloned();
            match arrivals {
                Some(arrivals) => {
                    arrivals.record(&body);
                    StatusCode::NO_CONTENT
                }
                None => StatusCode::NOT_FOUND,
            }
        }
        Err(_) => StatusCode::BAD_REQUEST,
    };
    let mut response = Response::new(Empty::new());
    *response.status_mut() = status;
    Ok(response)
}
