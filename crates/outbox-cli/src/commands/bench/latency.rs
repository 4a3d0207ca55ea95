//! `bench latency`: commit-to-acknowledgement latency under an open-loop
//! producer (a fixed schedule, so a slow relay cannot slow the producer and
//! hide its own latency).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{ensure, Result};
use async_trait::async_trait;
use clap::Args;
use outbox::{Event, NewEvent, Outbox, Outcome, Publisher, Relay, RelayConfig, Unavailable};
use serde_json::json;
use uuid::Uuid;

use super::stats::{ms, quantile};
use super::{fresh_schema, Server};
use crate::commands::Ctx;

/// Most events one run may produce (`--rate` × `--seconds`): every commit
/// and acknowledgement time is kept in memory until the end.
pub const MAX_EVENTS: u64 = 1_000_000;

#[derive(Debug, Args)]
pub struct LatencyArgs {
    /// Order transactions per second, 1 to 20000 (and --rate × --seconds at
    /// most 1000000 events).
    #[arg(long, default_value_t = 500, value_parser = clap::value_parser!(u32).range(1..=20_000))]
    pub rate: u32,
    /// Length of the run, seconds, 1 to 3600.
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u64).range(1..=3_600))]
    pub seconds: u64,
    /// Producer connections (enough that the schedule is kept), 1 to 500.
    #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u32).range(1..=500))]
    pub connections: u32,
}

/// A null broker that notes when each event was acknowledged.
#[derive(Default)]
struct AckClock {
    acked: Mutex<HashMap<Uuid, Instant>>,
}

#[async_trait]
impl Publisher for AckClock {
    fn name(&self) -> &str {
        "ack-clock"
    }
    async fn publish(&self, batch: &[Event]) -> Result<Vec<Outcome>, Unavailable> {
        let now = Instant::now();
        let mut acked = self.acked.lock().expect("lock");
        for e in batch {
            acked.entry(e.id).or_insert(now);
        }
        Ok(vec![Outcome::Delivered; batch.len()])
    }
}

pub async fn run(ctx: &Ctx, fsync: bool, args: LatencyArgs) -> Result<serde_json::Value> {
    let total = u64::from(args.rate) * args.seconds;
    ensure!(
        total <= MAX_EVENTS,
        "--rate {} × --seconds {} is {total} events: at most {MAX_EVENTS} per run; lower --rate or --seconds",
        args.rate,
        args.seconds
    );
    let server = Server::start(ctx, fsync).await?;
    let pool = server.pool(args.connections + 6).await?;
    let schema = fresh_schema(&pool, "bench_latency", false).await?;
    sqlx::raw_sql(
        "CREATE TABLE bench_latency.orders (
             id BIGINT PRIMARY KEY, customer_id BIGINT NOT NULL,
             total_cents BIGINT NOT NULL, created_at TIMESTAMPTZ NOT NULL DEFAULT NOW())",
    )
    .execute(&pool)
    .await?;

    let outbox = Outbox::with_schema(schema.clone());
    let clock = Arc::new(AckClock::default());
    let relay = Relay::builder(pool.clone(), clock.clone())
        .schema(schema.clone())
        .wakeup(outbox.wakeup())
        .config(RelayConfig {
            instance_id: Some("bench-latency".into()),
            ..RelayConfig::default()
        })
        .spawn()
        .await?;
    // Let the relay take its partitions before the clock starts.
    let deadline = Instant::now() + Duration::from_secs(30);
    while relay.held_partitions() == 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }

    let committed: Arc<Mutex<Vec<(Uuid, Instant)>>> =
        Arc::new(Mutex::new(Vec::with_capacity(total as usize)));
    let interval = Duration::from_secs_f64(1.0 / f64::from(args.rate));
    let start = tokio::time::Instant::now();
    let mut late = 0u64;
    let mut tasks = Vec::with_capacity(total as usize);
    eprintln!("bench latency: {} tx/s for {} s", args.rate, args.seconds);
    for i in 0..total {
        let due = start + interval.mul_f64(i as f64);
        tokio::time::sleep_until(due).await;
        if tokio::time::Instant::now() - due > Duration::from_millis(5) {
            late += 1;
        }
        let (pool, outbox, committed) = (pool.clone(), outbox.clone(), committed.clone());
        tasks.push(tokio::spawn(async move {
            let id = i as i64;
            let event = NewEvent::json(
                "order",
                id.to_string(),
                "order.created",
                json!({"order_id": id, "customer_id": id % 977, "total_cents": (id * 7919) % 100_000}),
            );
            let mut tx = pool.begin().await?;
            sqlx::query("INSERT INTO bench_latency.orders (id, customer_id, total_cents) VALUES ($1, $2, $3)")
                .bind(id)
                .bind(id % 977)
                .bind((id * 7919) % 100_000)
                .execute(&mut *tx)
                .await?;
            outbox.enqueue(&mut *tx, &event).await?;
            tx.commit().await?;
            let at = Instant::now();
            outbox.wake();
            committed.lock().expect("lock").push((event.id, at));
            anyhow::Ok(())
        }));
    }
    for t in tasks {
        t.await??;
    }
    let produce_secs = start.elapsed().as_secs_f64();
    let deadline = Instant::now() + Duration::from_secs(60);
    while relay.stats().delivered < total && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    relay.shutdown().await?;

    let (mut samples, early) = {
        let acked = clock.acked.lock().expect("lock");
        let committed = committed.lock().expect("lock");
        let mut early = 0u64;
        let samples: Vec<Duration> = committed
            .iter()
            .filter_map(|(id, at)| {
                let ack = acked.get(id)?;
                // The relay can see a commit before the client hears of it.
                Some(ack.checked_duration_since(*at).unwrap_or_else(|| {
                    early += 1;
                    Duration::ZERO
                }))
            })
            .collect();
        (samples, early)
    };
    ensure!(
        samples.len() as u64 == total,
        "only {} of {total} events were acknowledged",
        samples.len()
    );
    samples.sort();
    let (p50, p99, p999, max) = (
        quantile(&samples, 0.50),
        quantile(&samples, 0.99),
        quantile(&samples, 0.999),
        *samples.last().unwrap_or(&Duration::ZERO),
    );
    let achieved = total as f64 / produce_secs;
    println!("latency: {total} order transactions at {} /s (achieved {achieved:.0} /s, {late} started >5 ms late)", args.rate);
    println!(
        "  commit -> broker ack: p50 {:.2} ms, p99 {:.2} ms, p99.9 {:.2} ms, max {:.2} ms",
        ms(p50),
        ms(p99),
        ms(p999),
        ms(max)
    );
    if early > 0 {
        println!("  ({early} events were acknowledged before their commit returned to the client; counted as 0)");
    }
    sqlx::raw_sql("DROP SCHEMA bench_latency CASCADE")
        .execute(&pool)
        .await?;
    Ok(json!({
        "scenario": "latency",
        "rate": args.rate,
        "achieved_rate": achieved,
        "events": total,
        "late_starts": late,
        "p50_ms": ms(p50),
        "p99_ms": ms(p99),
        "p999_ms": ms(p999),
        "max_ms": ms(max),
    }))
}
