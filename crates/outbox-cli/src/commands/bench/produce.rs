//! `bench produce`: what the outbox costs the write path. K producers run
//! the seed's order transaction as fast as they can with (a) `enqueue` and
//! its wake-up, (b) a plain INSERT and no wake-up at all, (c) a plain INSERT
//! under the seed's per-row NOTIFY trigger.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Result;
use clap::Args;
use outbox::{NewEvent, Outbox, Schema};
use serde_json::json;
use sqlx::PgPool;

use super::stats::median;
use super::{fresh_schema, Server};
use crate::commands::Ctx;

#[derive(Debug, Args)]
pub struct ProduceArgs {
    /// Concurrent producers, 1 to 500 (each holds a connection).
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=500))]
    pub producers: u32,
    /// Seconds per variant per round, 1 to 3600.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=3_600))]
    pub seconds: u64,
    /// Rounds (variants interleaved; medians reported), 1 to 100.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=100))]
    pub rounds: u32,
    /// Wake-up coalescing interval for (a), milliseconds, 1 to 60000.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..=60_000))]
    pub wake_interval_ms: u64,
}

#[derive(Clone, Copy, PartialEq)]
enum Variant {
    Enqueue,
    Plain,
    Trigger,
}

impl Variant {
    fn schema(self) -> &'static str {
        match self {
            Variant::Enqueue => "bench_enqueue",
            Variant::Plain => "bench_plain",
            Variant::Trigger => "bench_trigger",
        }
    }
}

async fn setup(pool: &PgPool, v: Variant) -> Result<Schema> {
    let schema = fresh_schema(pool, v.schema(), v == Variant::Trigger).await?;
    sqlx::raw_sql(&format!(
        "CREATE TABLE {}.orders (
             id BIGINT PRIMARY KEY, customer_id BIGINT NOT NULL,
             total_cents BIGINT NOT NULL, created_at TIMESTAMPTZ NOT NULL DEFAULT NOW())",
        schema.name()
    ))
    .execute(pool)
    .await?;
    Ok(schema)
}

async fn run_variant(
    pool: &PgPool,
    schema: &Schema,
    v: Variant,
    args: &ProduceArgs,
) -> Result<f64> {
    let s = schema.name();
    sqlx::raw_sql(&format!("TRUNCATE {s}.orders, {s}.outbox_events"))
        .execute(pool)
        .await?;
    let outbox = Outbox::with_schema(schema.clone())
        .with_remote_wakeup(pool.clone(), Duration::from_millis(args.wake_interval_ms));
    let next_id = Arc::new(AtomicU64::new(1));
    let done = Arc::new(AtomicU64::new(0));
    let order_sql: Arc<str> =
        format!("INSERT INTO {s}.orders (id, customer_id, total_cents) VALUES ($1, $2, $3)").into();
    let event_sql: Arc<str> = format!(
        "INSERT INTO {s}.outbox_events (aggregate_type, aggregate_id, event_type, payload) VALUES ($1, $2, $3, $4)"
    )
    .into();
    let started = Instant::now();
    let until = started + Duration::from_secs(args.seconds);
    let mut tasks = Vec::new();
    for _ in 0..args.producers {
        let (pool, outbox, next_id, done) =
            (pool.clone(), outbox.clone(), next_id.clone(), done.clone());
        let (order_sql, event_sql) = (order_sql.clone(), event_sql.clone());
        tasks.push(tokio::spawn(async move {
            while Instant::now() < until {
                let id = next_id.fetch_add(1, Ordering::Relaxed) as i64;
                let payload = json!({"order_id": id, "customer_id": id % 977, "total_cents": (id * 7919) % 100_000});
                let mut tx = pool.begin().await?;
                sqlx::query(&order_sql)
                    .bind(id)
                    .bind(id % 977)
                    .bind((id * 7919) % 100_000)
                    .execute(&mut *tx)
                    .await?;
                match v {
                    Variant::Enqueue => {
                        let event = NewEvent::json("order", id.to_string(), "order.created", payload);
                        outbox.enqueue(&mut *tx, &event).await?;
                    }
                    Variant::Plain | Variant::Trigger => {
                        sqlx::query(&event_sql)
                            .bind("order")
                            .bind(id.to_string())
                            .bind("order.created")
                            .bind(sqlx::types::Json(&payload))
                            .execute(&mut *tx)
                            .await?;
                    }
                }
                tx.commit().await?;
                if v == Variant::Enqueue {
                    outbox.wake();
                }
                done.fetch_add(1, Ordering::Relaxed);
            }
            anyhow::Ok(())
        }));
    }
    for t in tasks {
        t.await??;
    }
    Ok(done.load(Ordering::Relaxed) as f64 / started.elapsed().as_secs_f64())
}

pub async fn run(ctx: &Ctx, fsync: bool, args: ProduceArgs) -> Result<serde_json::Value> {
    let server = Server::start(ctx, fsync).await?;
    let pool = server.pool(args.producers + 4).await?;
    let variants = [Variant::Plain, Variant::Enqueue, Variant::Trigger];
    let mut schemas = Vec::new();
    for v in variants {
        schemas.push(setup(&pool, v).await?);
    }
    let mut results: [Vec<f64>; 3] = Default::default();
    for round in 0..args.rounds {
        for (i, v) in variants.iter().enumerate() {
            let tps = run_variant(&pool, &schemas[i], *v, &args).await?;
            eprintln!(
                "bench produce: round {} {}: {tps:.0} tx/s",
                round + 1,
                v.schema()
            );
            results[i].push(tps);
        }
    }
    let (b, a, c) = (
        median(results[0].clone()),
        median(results[1].clone()),
        median(results[2].clone()),
    );
    println!(
        "produce: {} producers, {} s per variant, {} round(s), order transaction (order row + event)",
        args.producers, args.seconds, args.rounds
    );
    println!("  (b) plain INSERT, no wake-up:          {b:>8.0} tx/s");
    println!(
        "  (a) enqueue + coalesced wake-up:       {a:>8.0} tx/s   a/b = {:.2}",
        a / b
    );
    println!(
        "  (c) plain INSERT + seed NOTIFY trigger: {c:>7.0} tx/s   c/b = {:.2}",
        c / b
    );
    for s in &schemas {
        sqlx::raw_sql(&format!("DROP SCHEMA {} CASCADE", s.name()))
            .execute(&pool)
            .await?;
    }
    Ok(serde_json::json!({
        "scenario": "produce",
        "producers": args.producers,
        "seconds": args.seconds,
        "rounds": args.rounds,
        "plain_tps": b,
        "enqueue_tps": a,
        "trigger_tps": c,
        "a_over_b": a / b,
        "c_over_b": c / b,
    }))
}
