//! `bench produce`: what the outbox costs the write path. K producers run
//! the seed's order transaction (one `orders` row and its event) as fast as
//! they can, the event written each way of [`variant::Variant`]: against the
//! business row alone (o), a seed-like minimal outbox table (s) and a
//! logical decoding message (m), our default schema with a relay running
//! (d), without a trigger (b, e), through `enqueue` (a) and under the
//! seed's NOTIFY trigger (c), at each producer count of `--producers`.
//! Every variant gets the same rounds of the same length; the order of the
//! variants is reversed every other run so none always goes first or last.
//! Between runs the child relay is left to catch up, so its backlog never
//! runs into another variant's time. WAL bytes per transaction are read
//! from `pg_current_wal_lsn()` around each run.

mod report;
mod variant;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Result};
use clap::Args;
use outbox::{Outbox, Schema};
use serde_json::json;
use sqlx::PgPool;

use super::child_relay::{ChildRelay, Output};
use super::{event_rows, insert_order, order_insert, warm_up, Server};
use crate::ctx::Ctx;
use report::{index, AtCount, Run};
use variant::{Variant, Writer, VARIANTS};

/// How long a child relay may take to deliver what its run left behind.
const CATCH_UP: Duration = Duration::from_secs(300);

#[derive(Debug, Args)]
pub struct ProduceArgs {
    /// Concurrent producers, each from 1 to 500 (each holds a connection): a
    /// comma-separated list of counts, each measured in turn, or one count.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "1,4,8,16",
        value_parser = clap::value_parser!(u32).range(1..=500)
    )]
    pub producers: Vec<u32>,
    /// Seconds per variant per round, 1 to 3600.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=3_600))]
    pub seconds: u64,
    /// Rounds (variants interleaved; medians reported), 1 to 100.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=100))]
    pub rounds: u32,
    /// Wake-up coalescing interval for (a), milliseconds, 1 to 60000.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..=60_000))]
    pub wake_interval_ms: u64,
    /// Also run (e): no trigger, `outbox relay` running, as in (d). d/e is
    /// then the idle trigger's own cost, e/b what a running relay costs.
    #[arg(long)]
    pub relay_reference: bool,
}

/// One timed run of variant `v` with `producers` producers.
async fn run_variant(
    pool: &PgPool,
    schema: &Schema,
    v: Variant,
    producers: u32,
    args: &ProduceArgs,
) -> Result<Run> {
    v.truncate(pool, schema).await?;
    let outbox = Outbox::with_schema(schema.clone())
        .with_remote_wakeup(pool.clone(), Duration::from_millis(args.wake_interval_ms));
    let writer = Writer::new(v, schema, outbox);
    let next_id = Arc::new(AtomicU64::new(1));
    let done = Arc::new(AtomicU64::new(0));
    let order_sql = order_insert(schema);
    let wal_before = wal_lsn(pool).await?;
    let started = Instant::now();
    let until = started + Duration::from_secs(args.seconds);
    let mut tasks = Vec::new();
    for _ in 0..producers {
        let (pool, writer, next_id, done) =
            (pool.clone(), writer.clone(), next_id.clone(), done.clone());
        let order_sql = order_sql.clone();
        tasks.push(tokio::spawn(async move {
            while Instant::now() < until {
                let id = next_id.fetch_add(1, Ordering::Relaxed) as i64;
                let payload = json!({"order_id": id, "customer_id": id % 977, "total_cents": (id * 7919) % 100_000});
                let mut tx = pool.begin().await?;
                insert_order(&mut tx, &order_sql, id).await?;
                writer.event(&mut tx, id, &payload).await?;
                tx.commit().await?;
                writer.committed();
                done.fetch_add(1, Ordering::Relaxed);
            }
            anyhow::Ok(())
        }));
    }
    for t in tasks {
        t.await??;
    }
    let elapsed = started.elapsed().as_secs_f64();
    let wal = wal_lsn(pool).await? - wal_before;
    let done = done.load(Ordering::Relaxed).max(1) as f64;
    Ok(Run {
        tps: done / elapsed,
        wal_per_tx: wal as f64 / done,
    })
}

/// The server's `wal_level`.
async fn wal_level(pool: &PgPool) -> Result<String> {
    Ok(sqlx::query_scalar("SELECT current_setting('wal_level')")
        .fetch_one(pool)
        .await?)
}

/// The server's WAL position, in bytes.
async fn wal_lsn(pool: &PgPool) -> Result<i64> {
    Ok(
        sqlx::query_scalar("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint")
            .fetch_one(pool)
            .await?,
    )
}

/// Events of `schema` not yet delivered: its rows, or in the WAL mode the
/// bytes of WAL its slot has not confirmed (up to `target`, the server's
/// position when the run ended).
async fn pending(pool: &PgPool, schema: &Schema, target: Option<i64>) -> Result<i64> {
    match target {
        None => event_rows(pool, schema).await,
        Some(target) => {
            let confirmed: Option<i64> = sqlx::query_scalar(&format!(
                "SELECT pg_wal_lsn_diff(s.confirmed_flush_lsn, '0/0')::bigint
                 FROM pg_replication_slots s JOIN {}.outbox_wal w ON w.slot_name = s.slot_name",
                schema.name()
            ))
            .fetch_optional(pool)
            .await?
            .flatten();
            Ok((target - confirmed.unwrap_or(0)).max(0))
        }
    }
}

/// Waits until the relay has delivered everything of `schema` and is idle
/// again, so the next run starts from the same state.
async fn catch_up(
    relay: &mut ChildRelay,
    pool: &PgPool,
    schema: &Schema,
    target: Option<i64>,
) -> Result<()> {
    let deadline = Instant::now() + CATCH_UP;
    loop {
        relay.check_running()?;
        if pending(pool, schema, target).await? == 0 {
            break;
        }
        if Instant::now() > deadline {
            bail!(
                "the child relay on {} did not deliver its events within {} s",
                schema.name(),
                CATCH_UP.as_secs()
            );
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    relay.wait_idle(pool, schema, Duration::from_secs(60)).await
}

pub async fn run(ctx: &Ctx, fsync: bool, args: ProduceArgs) -> Result<serde_json::Value> {
    ensure!(
        !args.producers.is_empty(),
        "--producers needs at least one count"
    );
    let most = args.producers.iter().copied().max().unwrap_or(1);
    let server = Server::start(ctx, fsync).await?;
    let pool = server.pool(most + 4).await?;
    let logical = wal_level(&pool).await? == "logical";
    if !logical {
        eprintln!("bench produce: the server runs with wal_level other than logical: the WAL mode's variants (w, x) are left out");
    }
    let variants: Vec<Variant> = VARIANTS
        .into_iter()
        .filter(|&v| v != Variant::PlainRelay || args.relay_reference)
        .filter(|&v| !v.wal() || logical)
        .collect();
    let mut schemas: Vec<Option<Schema>> = vec![None; VARIANTS.len()];
    let mut relays: Vec<Option<ChildRelay>> = VARIANTS.iter().map(|_| None).collect();
    for &v in &variants {
        let schema = v.setup(&pool).await?;
        if v.relay() {
            // The relay as a user runs it; its output is not looked at here.
            let instance = format!("bench-produce-relay-{}", v.letter());
            let mut relay = ChildRelay::spawn(&server.url, &schema, &instance, Output::Discard)?;
            relay
                .wait_idle(&pool, &schema, Duration::from_secs(60))
                .await?;
            relays[index(v)] = Some(relay);
        }
        schemas[index(v)] = Some(schema);
    }
    warm_up(&pool, most).await?;

    let mut counts = Vec::new();
    for (k, &producers) in args.producers.iter().enumerate() {
        let mut at = AtCount::new(producers);
        for round in 0..args.rounds {
            let mut order = variants.clone();
            if (k + round as usize) % 2 == 1 {
                order.reverse();
            }
            for v in order {
                let i = index(v);
                let schema = schemas[i].as_ref().expect("set up");
                let run = run_variant(&pool, schema, v, producers, &args).await?;
                let mut note = String::new();
                if let Some(relay) = relays[i].as_mut() {
                    relay.check_running()?;
                    let target = match v.wal() {
                        true => Some(wal_lsn(&pool).await?),
                        false => None,
                    };
                    let left = pending(&pool, schema, target).await?;
                    at.backlog_max[i] = at.backlog_max[i].max(left);
                    let unit = if v.wal() { "WAL bytes" } else { "events" };
                    note = format!(" (relay {left} {unit} behind at the end)");
                    catch_up(relay, &pool, schema, target).await?;
                }
                eprintln!(
                    "bench produce: {producers} producers, round {} ({}) {}: {:.0} tx/s, {:.0} WAL bytes/tx{note}",
                    round + 1,
                    v.letter(),
                    v.schema(),
                    run.tps,
                    run.wal_per_tx
                );
                at.runs[i].push(run);
            }
        }
        counts.push(at);
    }
    for relay in relays.into_iter().flatten() {
        let status = relay.stop().await?;
        if !status.success() {
            eprintln!("bench produce: a child relay ended with {status}");
        }
    }

    println!(
        "produce: order transaction (order row + event), {} s per variant, {} round(s), order of variants alternating",
        args.seconds, args.rounds
    );
    let rows = report::print(&counts, &variants);
    for s in schemas.iter().flatten() {
        sqlx::raw_sql(&format!("DROP SCHEMA {} CASCADE", s.name()))
            .execute(&pool)
            .await?;
        super::drop_slot(&pool, s).await?;
    }
    Ok(json!({
        "scenario": "produce",
        "producers": args.producers,
        "seconds": args.seconds,
        "rounds": args.rounds,
        "by_producers": rows,
    }))
}
