//! A consumer that applies each event's effect once although the relay
//! delivers at least once: [`outbox::Inbox::process_once`] records the event
//! id in the consumer's own transaction, beside the effect, so a redelivered
//! event finds its mark and is skipped, and a rollback forgets both.
//!
//! ```sh
//! cargo run -p outbox-examples --bin inbox_consumer
//! ```
//!
//! Without arguments it consumes a sample in the form the relay prints:
//! three `order.created` events, the second delivered twice (as after a
//! relay that stopped between publishing and acknowledging). With
//! `--stdin` it reads the relay's JSON lines from standard input instead:
//!
//! ```sh
//! cargo run -p outbox-examples --bin order_service \
//!   | cargo run -p outbox-examples --bin inbox_consumer -- --stdin
//! ```
//!
//! The effect is a running total per customer (`example_customer_totals`):
//! an increment, which would count a redelivered order twice without the
//! inbox. It runs on a throwaway PostgreSQL, or on `DATABASE_URL` (where the
//! totals then add up across runs).

use std::collections::BTreeSet;
use std::io::BufRead;

use anyhow::{bail, Context, Result};
use outbox::Inbox;
use outbox_examples::Database;
use serde::Deserialize;
use serde_json::json;
use sqlx::PgPool;
use uuid::Uuid;

/// This consumer's name in the inbox: each consumer keeps its own marks,
/// so another consumer of the same events is not affected.
const CONSUMER: &str = "customer-totals";

/// The fields of a relay JSON line this consumer reads.
#[derive(Debug, Deserialize)]
struct Delivery {
    id: Uuid,
    event_type: String,
    payload: serde_json::Value,
}

/// The payload of `order.created`, as the order service writes it.
#[derive(Debug, Deserialize)]
struct OrderCreated {
    order_id: i64,
    customer: String,
    total_cents: i64,
}

/// What happened to one delivery.
enum Handled {
    /// First sight: the effect was committed, with the inbox mark.
    Applied(String),
    /// Seen before: skipped, nothing written.
    Duplicate,
}

/// Applies one delivery in one transaction: the inbox mark and the effect
/// commit together, or neither does.
async fn handle(pool: &PgPool, inbox: &Inbox, delivery: &Delivery) -> Result<Handled> {
    let mut tx = pool.begin().await?;
    if !inbox.process_once(&mut tx, CONSUMER, delivery.id).await? {
        // Its effect was committed before. Dropping `tx` rolls back the
        // (empty) transaction.
        return Ok(Handled::Duplicate);
    }
    let effect = match delivery.event_type.as_str() {
        "order.created" => {
            let order: OrderCreated = serde_json::from_value(delivery.payload.clone())
                .context("an order.created payload without order_id, customer, total_cents")?;
            sqlx::query(
                "INSERT INTO example_customer_totals (customer, orders, total_cents)
                 VALUES ($1, 1, $2)
                 ON CONFLICT (customer) DO UPDATE
                 SET orders = example_customer_totals.orders + 1,
                     total_cents = example_customer_totals.total_cents + EXCLUDED.total_cents",
            )
            .bind(&order.customer)
            .bind(order.total_cents)
            .execute(&mut *tx)
            .await?;
            format!(
                "order {} of {}: +{} cents",
                order.order_id, order.customer, order.total_cents
            )
        }
        // Marked all the same: seen, and nothing to do.
        other => format!("{other}: not for this consumer"),
    };
    // An error above (a bad payload, a lost connection) returns before this
    // commit: the mark is rolled back with the effect, and the event counts
    // as unseen when it comes again.
    tx.commit().await?;
    Ok(Handled::Applied(effect))
}

/// Three orders as the relay prints them, the second delivered twice.
fn sample() -> Vec<String> {
    let orders = [(1, "ada", 1250), (2, "grace", 4999), (3, "ada", 300)];
    let lines: Vec<String> = orders
        .iter()
        .map(|(order_id, customer, total_cents)| {
            json!({
                "id": Uuid::now_v7(),
                "aggregate_type": "order",
                "aggregate_id": order_id.to_string(),
                "event_type": "order.created",
                "payload": {"order_id": order_id, "customer": customer, "total_cents": total_cents},
                "headers": {},
                "topic": null,
            })
            .to_string()
        })
        .collect();
    vec![
        lines[0].clone(),
        lines[1].clone(),
        lines[2].clone(),
        lines[1].clone(),
    ]
}

/// The read model this consumer keeps: orders and spend per customer.
const TOTALS_TABLE: &str = "CREATE TABLE IF NOT EXISTS example_customer_totals (
         customer    TEXT PRIMARY KEY,
         orders      BIGINT NOT NULL,
         total_cents BIGINT NOT NULL)";

#[tokio::main]
async fn main() -> Result<()> {
    let lines = match std::env::args().skip(1).collect::<Vec<_>>().as_slice() {
        [] => sample(),
        [flag] if flag == "--stdin" => std::io::stdin()
            .lock()
            .lines()
            .collect::<std::io::Result<_>>()?,
        _ => bail!("usage: inbox_consumer [--stdin]"),
    };

    let db = Database::prepared("inbox_consumer", 2, TOTALS_TABLE).await?;
    let pool = db.pool.clone();

    let inbox = Inbox::new();
    let (mut read, mut applied, mut duplicates) = (0, 0, 0);
    let mut customers = BTreeSet::new();
    for line in lines.iter().filter(|l| l.starts_with('{')) {
        let delivery: Delivery =
            serde_json::from_str(line).with_context(|| format!("not a relay line: {line}"))?;
        read += 1;
        if let Some(customer) = delivery.payload.get("customer").and_then(|c| c.as_str()) {
            customers.insert(customer.to_owned());
        }
        match handle(&pool, &inbox, &delivery).await? {
            Handled::Applied(effect) => {
                applied += 1;
                println!("applied  {} {}: {effect}", delivery.id, delivery.event_type);
            }
            Handled::Duplicate => {
                duplicates += 1;
                println!(
                    "skipped  {} {}: already processed (a redelivery)",
                    delivery.id, delivery.event_type
                );
            }
        }
    }

    println!(
        "inbox_consumer: {read} deliveries read, {applied} applied, {duplicates} skipped as duplicates"
    );
    let totals: Vec<(String, i64, i64)> = sqlx::query_as(
        "SELECT customer, orders, total_cents FROM example_customer_totals
         WHERE customer = ANY($1) ORDER BY customer",
    )
    .bind(customers.into_iter().collect::<Vec<_>>())
    .fetch_all(&pool)
    .await?;
    for (customer, orders, total_cents) in totals {
        let s = if orders == 1 { "" } else { "s" };
        println!("inbox_consumer: total of {customer}: {orders} order{s}, {total_cents} cents");
    }
    Ok(())
}
