//! A service of your own with the outbox's web console mounted at
//! `/outbox` on its own server: crate `outbox-console` builds the console
//! (its sign-in, CSRF checks and security headers included) as an axum
//! `Router`, which the service merges beside its own routes.
//!
//! ```sh
//! OUTBOX_CONSOLE_PASSWORD=change-me cargo run -p outbox-examples --bin mounted_console
//! ```
//!
//! It starts a throwaway PostgreSQL (or uses `DATABASE_URL`), writes three
//! `order.created` events for the console to show, and serves until
//! Ctrl-C on a free port of 127.0.0.1 (or on `--serve ADDR`): the service's
//! own page at `/`, the console at `/outbox/`. Without
//! `OUTBOX_CONSOLE_PASSWORD` the console asks for no password and answers
//! only to a loopback `Host`.

use std::net::SocketAddr;

use anyhow::{bail, Result};
use axum::response::Html;
use axum::routing::get;
use axum::Router;
use outbox::{NewEvent, Outbox};
use outbox_console::Console;
use outbox_examples::Database;
use sqlx::postgres::PgPoolOptions;
use tokio::net::TcpListener;

/// The service's own table: the console shows the outbox beside it.
const ORDERS_TABLE: &str = "CREATE TABLE IF NOT EXISTS example_orders (
         id          BIGSERIAL PRIMARY KEY,
         customer    TEXT NOT NULL,
         total_cents BIGINT NOT NULL)";

#[tokio::main]
async fn main() -> Result<()> {
    let serve_addr: SocketAddr = match std::env::args().skip(1).collect::<Vec<_>>().as_slice() {
        [] => ([127, 0, 0, 1], 0).into(),
        [flag, addr] if flag == "--serve" => addr.parse()?,
        _ => bail!("usage: mounted_console [--serve ADDR]"),
    };
    let db = Database::prepared("mounted_console", 4, ORDERS_TABLE).await?;
    place_orders(&db.pool).await?;

    // The console reads on connections of its own, so it never waits
    // behind the service's work.
    let console_pool = PgPoolOptions::new()
        .max_connections(2)
        .connect_with((*db.pool.connect_options()).clone())
        .await?;
    let mut console =
        Console::builder(console_pool, &outbox::Schema::default()).base_path("/outbox");
    if let Ok(password) = std::env::var("OUTBOX_CONSOLE_PASSWORD") {
        console = console.password(password);
    }
    let console = console.build()?;

    let app = Router::new()
        .route("/", get(home))
        .route("/healthz", get(|| async { "ok\n" }))
        .merge(console.router());

    let listener = TcpListener::bind(serve_addr).await?;
    let addr = listener.local_addr()?;
    eprintln!("mounted_console: the service on http://{addr}/, the console on http://{addr}/outbox/; Ctrl-C stops");
    // With each client's address, for the console's sign-in throttle.
    axum::serve(
        listener,
        app.into_make_service_with_connect_info::<SocketAddr>(),
    )
    .with_graceful_shutdown(async {
        let _ = tokio::signal::ctrl_c().await;
    })
    .await?;
    eprintln!("mounted_console: shut down");
    Ok(())
}

/// The service's own page.
async fn home() -> Html<&'static str> {
    Html(
        "<!doctype html><title>Orders</title><h1>Orders</h1>\
         <p>The outbox of this service: <a id=\"console\" href=\"/outbox/\">its console</a>.</p>",
    )
}

/// Three orders, each with its `order.created` event in the same
/// transaction. No relay runs here: they wait, pending, for the console.
async fn place_orders(pool: &sqlx::PgPool) -> Result<()> {
    let outbox = Outbox::new();
    let mut tx = pool.begin().await?;
    for (customer, total_cents) in [("ada", 1250_i64), ("grace", 4999), ("ada", 300)] {
        let order_id: i64 = sqlx::query_scalar(
            "INSERT INTO example_orders (customer, total_cents) VALUES ($1, $2) RETURNING id",
        )
        .bind(customer)
        .bind(total_cents)
        .fetch_one(&mut *tx)
        .await?;
        let event = NewEvent::new(
            "order",
            order_id.to_string(),
            "order.created",
            &serde_json::json!({"order_id": order_id, "customer": customer, "total_cents": total_cents}),
        )?;
        outbox.enqueue(&mut *tx, &event).await?;
    }
    tx.commit().await?;
    Ok(())
}
