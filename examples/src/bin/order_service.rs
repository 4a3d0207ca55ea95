//! An order service: `POST /orders` writes the order row and its
//! `order.created` event in one transaction, and a relay embedded in the
//! same process publishes the event to standard output as a JSON line, woken
//! by the commit instead of waiting for its next poll.
//!
//! ```sh
//! cargo run -p outbox-examples --bin order_service
//! ```
//!
//! It starts a throwaway PostgreSQL (or uses `DATABASE_URL`), serves on a
//! free port of 127.0.0.1, places three orders by calling itself over HTTP,
//! waits until the relay has published their events, shuts down gracefully
//! and prints a summary. Standard output carries only the relay's JSON
//! lines (everything else goes to standard error), so it can feed the inbox
//! consumer:
//!
//! ```sh
//! cargo run -p outbox-examples --bin order_service \
//!   | cargo run -p outbox-examples --bin inbox_consumer -- --stdin
//! ```
//!
//! With `--serve ADDR` it keeps serving on `ADDR` until Ctrl-C instead:
//!
//! ```sh
//! cargo run -p outbox-examples --bin order_service -- --serve 127.0.0.1:3000
//! curl -H 'content-type: application/json' -d '{"customer": "ada", "total_cents": 1250}' \
//!   http://127.0.0.1:3000/orders
//! ```

use std::collections::HashMap;
use std::future::IntoFuture;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use outbox::{BatchReport, NewEvent, Outbox, Relay, RelayObserver};
use outbox_examples::Database;
use outbox_publishers::StdoutPublisher;
use serde::{Deserialize, Serialize};
use sqlx::PgPool;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot};
use uuid::Uuid;

/// The orders the self-run places: (customer, total in cents).
const ORDERS: [(&str, i64); 3] = [("ada", 1250), ("grace", 4999), ("ada", 300)];

/// How long the self-run waits for the relay to publish the events.
const DELIVERY_DEADLINE: Duration = Duration::from_secs(30);

/// The request body of `POST /orders`.
#[derive(Debug, Serialize, Deserialize)]
struct PlaceOrder {
    customer: String,
    total_cents: i64,
}

/// The event's payload: what a consumer needs without calling back.
#[derive(Debug, Serialize)]
struct OrderCreated<'a> {
    order_id: i64,
    customer: &'a str,
    total_cents: i64,
}

/// The response of `POST /orders`.
#[derive(Debug, Serialize, Deserialize)]
struct Placed {
    order_id: i64,
    event_id: Uuid,
}

#[derive(Clone)]
struct App {
    pool: PgPool,
    outbox: Outbox,
}

/// `POST /orders`: the order and its event commit together or not at all.
async fn place_order(
    State(app): State<App>,
    Json(order): Json<PlaceOrder>,
) -> Result<(StatusCode, Json<Placed>), ApiError> {
    if order.customer.trim().is_empty() || order.total_cents <= 0 {
        return Err(ApiError::invalid(
            "an order needs a customer and a positive total_cents",
        ));
    }
    // Any `?` below drops `tx` uncommitted, which rolls back the order
    // and its event alike.
    let mut tx = app.pool.begin().await?;
    let order_id: i64 = sqlx::query_scalar(
        "INSERT INTO example_orders (customer, total_cents) VALUES ($1, $2) RETURNING id",
    )
    .bind(&order.customer)
    .bind(order.total_cents)
    .fetch_one(&mut *tx)
    .await?;
    let event = NewEvent::new(
        "order",
        order_id.to_string(),
        "order.created",
        &OrderCreated {
            order_id,
            customer: &order.customer,
            total_cents: order.total_cents,
        },
    )?;
    let event_id = app.outbox.enqueue(&mut *tx, &event).await?;
    tx.commit().await?;
    // After the commit, never before it: the relay must find the event.
    app.outbox.wake();
    Ok((StatusCode::CREATED, Json(Placed { order_id, event_id })))
}

/// An error answered as `{"error": "..."}`.
struct ApiError(StatusCode, String);

impl ApiError {
    fn invalid(message: impl Into<String>) -> ApiError {
        ApiError(StatusCode::UNPROCESSABLE_ENTITY, message.into())
    }
}

impl From<sqlx::Error> for ApiError {
    fn from(e: sqlx::Error) -> ApiError {
        eprintln!("order_service: database error: {e}");
        ApiError(StatusCode::INTERNAL_SERVER_ERROR, "database error".into())
    }
}

impl From<outbox::Error> for ApiError {
    fn from(e: outbox::Error) -> ApiError {
        match e {
            // The event was refused before anything was written.
            outbox::Error::Invalid { .. } => ApiError::invalid(e.to_string()),
            other => {
                eprintln!("order_service: {}", other.with_causes());
                ApiError(StatusCode::INTERNAL_SERVER_ERROR, "outbox error".into())
            }
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.0, Json(serde_json::json!({ "error": self.1 }))).into_response()
    }
}

/// Tells the self-run which events the relay has published, and when.
struct Published(mpsc::UnboundedSender<(Uuid, Instant)>);

impl RelayObserver for Published {
    fn on_batch(&self, report: &BatchReport<'_>) {
        let now = Instant::now();
        for event in report.delivered {
            let _ = self.0.send((event.id, now));
        }
    }
}

/// The business table the service writes, next to its events.
const ORDERS_TABLE: &str = "CREATE TABLE IF NOT EXISTS example_orders (
         id          BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
         customer    TEXT NOT NULL,
         total_cents BIGINT NOT NULL,
         created_at  TIMESTAMPTZ NOT NULL DEFAULT now())";

#[tokio::main]
async fn main() -> Result<()> {
    let serve_addr = match std::env::args().skip(1).collect::<Vec<_>>().as_slice() {
        [] => None,
        [flag, addr] if flag == "--serve" => Some(addr.parse::<SocketAddr>()?),
        _ => bail!("usage: order_service [--serve ADDR]"),
    };

    let db = Database::prepared("order_service", 10, ORDERS_TABLE).await?;
    let pool = db.pool.clone();

    // The relay shares the producer's wake-up, so `outbox.wake()` after a
    // commit reaches it at once.
    let outbox = Outbox::new();
    let (published_tx, published_rx) = mpsc::unbounded_channel();
    let relay = Relay::builder(pool.clone(), StdoutPublisher)
        .wakeup(outbox.wakeup())
        .observer(Arc::new(Published(published_tx)))
        .spawn()
        .await?;

    let app = Router::new()
        .route("/orders", post(place_order))
        .with_state(App {
            pool: pool.clone(),
            outbox,
        });
    let listener = TcpListener::bind(serve_addr.unwrap_or(([127, 0, 0, 1], 0).into())).await?;
    let addr = listener.local_addr()?;
    let (stop_tx, stop_rx) = oneshot::channel::<()>();
    let server = tokio::spawn(
        axum::serve(listener, app)
            .with_graceful_shutdown(async {
                let _ = stop_rx.await;
            })
            .into_future(),
    );
    eprintln!("order_service: listening on http://{addr}");

    let placed = if serve_addr.is_some() {
        drop(published_rx);
        eprintln!("order_service: POST JSON to http://{addr}/orders; Ctrl-C stops");
        tokio::signal::ctrl_c().await?;
        Vec::new()
    } else {
        place_and_await(addr, published_rx).await?
    };

    // Graceful shutdown: the server finishes its requests, then the relay
    // finishes its in-flight batch and releases its partitions.
    let _ = stop_tx.send(());
    server.await??;
    let stats = relay.shutdown().await?;
    if serve_addr.is_none() {
        let ids: Vec<String> = placed.iter().map(|p| p.order_id.to_string()).collect();
        eprintln!(
            "order_service: {} orders placed over HTTP (orders {}), their {} order.created events published by the relay; shut down cleanly",
            placed.len(),
            ids.join(", "),
            placed.len(),
        );
    } else {
        eprintln!(
            "order_service: {} events published; shut down cleanly",
            stats.delivered
        );
    }
    Ok(())
}

/// Places [`ORDERS`] through the HTTP API and waits until the relay has
/// published each order's event.
async fn place_and_await(
    addr: SocketAddr,
    mut published: mpsc::UnboundedReceiver<(Uuid, Instant)>,
) -> Result<Vec<Placed>> {
    let mut placed = Vec::new();
    // Event id -> (order id, when the service answered: after the commit).
    let mut waiting: HashMap<Uuid, (i64, Instant)> = HashMap::new();
    for (customer, total_cents) in ORDERS {
        let body = serde_json::to_string(&PlaceOrder {
            customer: customer.into(),
            total_cents,
        })?;
        let (status, response) = post_json(addr, "/orders", &body).await?;
        let committed = Instant::now();
        ensure!(status == 201, "POST /orders answered {status}: {response}");
        let p: Placed = serde_json::from_str(&response)?;
        eprintln!(
            "order_service: POST /orders {body} -> 201: placed order {} with event {}",
            p.order_id, p.event_id
        );
        waiting.insert(p.event_id, (p.order_id, committed));
        placed.push(p);
    }
    tokio::time::timeout(DELIVERY_DEADLINE, async {
        while !waiting.is_empty() {
            let Some((id, at)) = published.recv().await else {
                break;
            };
            if let Some((order_id, committed)) = waiting.remove(&id) {
                eprintln!(
                    "order_service: the relay reported the event of order {order_id} delivered {:.1?} after the response",
                    at.saturating_duration_since(committed)
                );
            }
        }
    })
    .await
    .context("the relay did not publish every event in time")?;
    ensure!(
        waiting.is_empty(),
        "the relay stopped before publishing {waiting:?}"
    );
    Ok(placed)
}

/// One HTTP/1.1 `POST` with a JSON body, as `curl` would send it; returns
/// the status code and the body. (A real client would use an HTTP library;
/// this keeps the example's dependencies to the server side.)
async fn post_json(addr: SocketAddr, path: &str, body: &str) -> Result<(u16, String)> {
    let mut stream = TcpStream::connect(addr).await?;
    let request = format!(
        "POST {path} HTTP/1.1\r\nhost: {addr}\r\ncontent-type: application/json\r\n\
         content-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).await?;
    let mut response = String::new();
    stream.read_to_string(&mut response).await?;
    let (head, body) = response
        .split_once("\r\n\r\n")
        .context("an HTTP response without a blank line")?;
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .with_context(|| format!("no status code in {head:?}"))?;
    Ok((status, body.to_owned()))
}
