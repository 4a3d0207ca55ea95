//! A custom [`outbox::Publisher`] and the proof that it behaves: a publisher
//! for a small line-protocol broker (`publisher.rs`; the broker, in
//! `broker.rs`, runs in the same process) put through the publisher
//! conformance suite of `outbox_testkit::conformance`, with a real relay on
//! PostgreSQL for the cases that need one.
//!
//! ```sh
//! cargo run -p outbox-examples --bin custom_publisher
//! ```
//!
//! To check a publisher of your own, implement [`Harness`] for it as
//! `LineHarness` does below (build a publisher, read messages back, stop
//! and start the broker if you can) and state its [`Capabilities`]
//! honestly: a case whose capability is missing reports itself "not
//! applicable" instead of running. This broker has them all: keys, a size
//! limit, stop and start, and messages kept across a restart.
//!
//! Each case that needs PostgreSQL gets a fresh database: on a throwaway
//! cluster, or on the server named by `DATABASE_URL` (whose user must be
//! allowed to `CREATE DATABASE`; the databases are dropped afterwards). A
//! failed case panics with what went wrong; the program then exits non-zero.

mod broker;
mod publisher;

use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use async_trait::async_trait;
use outbox_testkit::conformance::{self, Capabilities, Harness, Received, Scope};
use outbox_testkit::postgres::{test_db, TestDb};
use sqlx::{Connection, PgConnection, PgPool};

use broker::{LineBroker, MAX_MESSAGE_BYTES};
use publisher::LinePublisher;

/// The publisher's destination template.
const TEMPLATE: &str = "events.{aggregate_type}";

/// The conformance suite's view of the publisher and its broker.
struct LineHarness {
    broker: LineBroker,
}

#[async_trait(?Send)]
impl Harness for LineHarness {
    type Publisher = LinePublisher;

    fn name(&self) -> String {
        "line-broker".into()
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            // Every message carries the aggregate id as its key.
            keyed: true,
            // The broker refuses lines over its limit; a payload that size
            // makes a longer line.
            oversized_payload_bytes: Some(MAX_MESSAGE_BYTES),
            // `stop_broker` closes the listener and every connection.
            stop_start: true,
            // Stored messages outlive a stop (they are in this process's
            // memory, which a stop does not touch).
            keeps_data_across_restart: true,
        }
    }

    async fn publisher(&self) -> LinePublisher {
        LinePublisher::new(self.broker.addr(), TEMPLATE)
    }

    fn default_destination(&self, scope: &Scope) -> String {
        TEMPLATE.replace("{aggregate_type}", scope.aggregate_type())
    }

    async fn consume(&self, scope: &Scope, expected: usize, deadline: Duration) -> Vec<Received> {
        let destinations = [
            self.default_destination(scope),
            scope.override_destination(),
        ];
        let until = Instant::now() + deadline;
        loop {
            let received: Vec<Received> = self
                .broker
                .messages()
                .into_iter()
                .filter(|m| destinations.contains(&m.destination))
                .map(|m| Received {
                    destination: m.destination,
                    key: Some(m.key),
                    headers: m.headers,
                    payload: m.payload.into_bytes(),
                })
                .collect();
            if conformance::distinct_events(&received) >= expected || Instant::now() >= until {
                return received;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    async fn stop_broker(&self) {
        self.broker.stop().await;
    }

    async fn start_broker(&self) {
        self.broker
            .start_again()
            .await
            .expect("starting the line broker again on its port");
    }
}

/// The fresh databases the cases run on, dropped at the end when they are
/// on a server of the user's (a throwaway cluster goes away by itself).
#[derive(Default)]
struct Databases {
    created: Vec<(TestDb, PgPool)>,
}

impl Databases {
    /// A pool on a new, empty database.
    async fn fresh(&mut self) -> PgPool {
        let db = test_db().await;
        let pool = db.pool().await;
        self.created.push((db, pool.clone()));
        pool
    }

    async fn drop_all(self) -> Result<()> {
        for (_, pool) in &self.created {
            pool.close().await;
        }
        let Ok(url) = std::env::var("DATABASE_URL") else {
            return Ok(());
        };
        let mut admin = PgConnection::connect(&url)
            .await
            .context("connecting to DATABASE_URL to drop the case databases")?;
        for (db, _) in &self.created {
            sqlx::query(&format!("DROP DATABASE IF EXISTS \"{}\"", db.name))
                .execute(&mut admin)
                .await
                .with_context(|| format!("dropping database {}", db.name))?;
        }
        Ok(())
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<()> {
    let broker = LineBroker::start().await?;
    eprintln!(
        "custom_publisher: line broker listening on {}",
        broker.addr()
    );
    let h = LineHarness { broker };
    let caps = h.capabilities();
    println!("custom_publisher: capabilities {caps:?}");

    let mut dbs = Databases::default();
    let (mut passed, mut not_applicable) = (0, 0);
    // A case without its capability returns early ("not applicable").
    let mut report = |case: &str, applies: bool| {
        if applies {
            passed += 1;
            println!("passed          {case}");
        } else {
            not_applicable += 1;
            println!("not applicable  {case}");
        }
    };

    conformance::delivers_a_batch(&h).await;
    report("delivers_a_batch", true);
    conformance::maps_headers_key_and_destination(&h).await;
    report("maps_headers_key_and_destination", true);
    conformance::calls_in_flight_at_once_each_settle_their_own_events(&h).await;
    report("calls_in_flight_at_once_each_settle_their_own_events", true);
    conformance::keeps_aggregate_order(&h, &dbs.fresh().await).await;
    report("keeps_aggregate_order", true);
    conformance::drains_a_large_batch(&h, &dbs.fresh().await, 5_000).await;
    report("drains_a_large_batch", true);
    conformance::delivers_every_event_as_stored(
        &h,
        &dbs.fresh().await,
        Some(MAX_MESSAGE_BYTES / 2),
    )
    .await;
    report("delivers_every_event_as_stored", true);
    conformance::rejects_an_oversized_message(&h, &dbs.fresh().await).await;
    report(
        "rejects_an_oversized_message",
        caps.oversized_payload_bytes.is_some(),
    );
    conformance::outage_burns_no_attempts(&h, &dbs.fresh().await).await;
    report("outage_burns_no_attempts", caps.stop_start);
    conformance::survives_a_broker_restart(&h, &dbs.fresh().await).await;
    report("survives_a_broker_restart", caps.keeps_data_across_restart);

    dbs.drop_all().await?;
    println!(
        "custom_publisher: {passed} conformance cases passed, {not_applicable} not applicable, 0 failed"
    );
    Ok(())
}
