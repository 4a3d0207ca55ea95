//! `bench produce`: what the outbox costs the write path. K producers run
//! the seed's order transaction as fast as they can with
//! - (b) a plain INSERT and no trigger at all: the reference;
//! - (a) `enqueue` and its coalesced remote wake-up;
//! - (c) a plain INSERT under the seed's per-row NOTIFY trigger;
//! - (d) a plain INSERT into a schema migrated the default way (the idle
//!   wake-up trigger), with `outbox relay` running as a child process and
//!   delivering as the producers write;
//! - (e), with `--relay-reference`: a plain INSERT into a schema with no
//!   trigger, with `outbox relay` running as in (d): what running a relay
//!   costs the producers by itself, so d/e is the trigger's own share.
//!
//! at each producer count of `--producers`. Every variant gets the same
//! rounds of the same length; the order of the variants is reversed every
//! other run so none always goes first or last. Between runs the child
//! relay is left to catch up, so its backlog never runs into another
//! variant's time.
//!
//! A little over 400 lines: four variants at several producer counts, run
//! alternately so each gets the same conditions; the fairness is the point.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Result};
use clap::Args;
use outbox::{NewEvent, Outbox, Schema, WakeupTrigger};
use serde_json::json;
use sqlx::PgPool;

use super::child_relay::{ChildRelay, Output};
use super::stats::median;
use super::{create_orders, event_rows, fresh_schema, insert_order, order_insert, warm_up, Server};
use crate::commands::Ctx;

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

#[derive(Clone, Copy, PartialEq, Debug)]
enum Variant {
    Plain,
    Enqueue,
    Trigger,
    IdleRelay,
    PlainRelay,
}

/// In the order of the first run; reversed every other run.
const VARIANTS: [Variant; 5] = [
    Variant::Plain,
    Variant::Enqueue,
    Variant::Trigger,
    Variant::IdleRelay,
    Variant::PlainRelay,
];

impl Variant {
    fn schema(self) -> &'static str {
        match self {
            Variant::Plain => "bench_plain",
            Variant::Enqueue => "bench_enqueue",
            Variant::Trigger => "bench_trigger",
            Variant::IdleRelay => "bench_idle",
            Variant::PlainRelay => "bench_plain_relay",
        }
    }

    /// The variant's letter in the summary.
    fn letter(self) -> &'static str {
        match self {
            Variant::Plain => "b",
            Variant::Enqueue => "a",
            Variant::Trigger => "c",
            Variant::IdleRelay => "d",
            Variant::PlainRelay => "e",
        }
    }

    /// Whether `outbox relay` runs while the producers write.
    fn relay(self) -> bool {
        matches!(self, Variant::IdleRelay | Variant::PlainRelay)
    }

    fn wakeup(self) -> WakeupTrigger {
        match self {
            Variant::Plain | Variant::Enqueue | Variant::PlainRelay => WakeupTrigger::Off,
            Variant::Trigger => WakeupTrigger::EveryInsert,
            Variant::IdleRelay => WakeupTrigger::default(),
        }
    }
}

async fn setup(pool: &PgPool, v: Variant) -> Result<Schema> {
    let schema = fresh_schema(pool, v.schema(), v.wakeup()).await?;
    create_orders(pool, &schema).await?;
    Ok(schema)
}

/// One timed run of variant `v` with `producers` producers: transactions
/// per second.
async fn run_variant(
    pool: &PgPool,
    schema: &Schema,
    v: Variant,
    producers: u32,
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
    let order_sql = order_insert(schema);
    let event_sql: Arc<str> = format!(
        "INSERT INTO {s}.outbox_events (aggregate_type, aggregate_id, event_type, payload) VALUES ($1, $2, $3, $4)"
    )
    .into();
    let started = Instant::now();
    let until = started + Duration::from_secs(args.seconds);
    let mut tasks = Vec::new();
    for _ in 0..producers {
        let (pool, outbox, next_id, done) =
            (pool.clone(), outbox.clone(), next_id.clone(), done.clone());
        let (order_sql, event_sql) = (order_sql.clone(), event_sql.clone());
        tasks.push(tokio::spawn(async move {
            while Instant::now() < until {
                let id = next_id.fetch_add(1, Ordering::Relaxed) as i64;
                let payload = json!({"order_id": id, "customer_id": id % 977, "total_cents": (id * 7919) % 100_000});
                let mut tx = pool.begin().await?;
                insert_order(&mut tx, &order_sql, id).await?;
                match v {
                    Variant::Enqueue => {
                        let event = NewEvent::json("order", id.to_string(), "order.created", payload);
                        outbox.enqueue(&mut *tx, &event).await?;
                    }
                    Variant::Plain
                    | Variant::Trigger
                    | Variant::IdleRelay
                    | Variant::PlainRelay => {
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

/// Events of `schema` not yet delivered.
async fn pending(pool: &PgPool, schema: &Schema) -> Result<i64> {
    event_rows(pool, schema).await
}

/// Waits until the relay has delivered everything of `schema` and is idle
/// again, so the next run starts from the same state.
async fn catch_up(relay: &mut ChildRelay, pool: &PgPool, schema: &Schema) -> Result<()> {
    let deadline = Instant::now() + CATCH_UP;
    loop {
        relay.check_running()?;
        if pending(pool, schema).await? == 0 {
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

/// The figures at one producer count.
struct AtCount {
    producers: u32,
    /// Transactions per second of each run, by variant (index in
    /// [`VARIANTS`]).
    runs: [Vec<f64>; 5],
    /// Events a relay variant's relay had left undelivered when its
    /// producers stopped, at most, by variant.
    backlog_max: [i64; 5],
}

impl AtCount {
    fn tps(&self, v: Variant) -> Option<f64> {
        let i = index(v);
        (!self.runs[i].is_empty()).then(|| median(self.runs[i].clone()))
    }
}

fn index(v: Variant) -> usize {
    VARIANTS.iter().position(|&x| x == v).expect("a variant")
}

pub async fn run(ctx: &Ctx, fsync: bool, args: ProduceArgs) -> Result<serde_json::Value> {
    ensure!(
        !args.producers.is_empty(),
        "--producers needs at least one count"
    );
    let most = args.producers.iter().copied().max().unwrap_or(1);
    let server = Server::start(ctx, fsync).await?;
    let pool = server.pool(most + 4).await?;
    let variants: Vec<Variant> = VARIANTS
        .into_iter()
        .filter(|&v| v != Variant::PlainRelay || args.relay_reference)
        .collect();
    let mut schemas: Vec<Option<Schema>> = vec![None; VARIANTS.len()];
    let mut relays: Vec<Option<ChildRelay>> = VARIANTS.iter().map(|_| None).collect();
    for &v in &variants {
        let schema = setup(&pool, v).await?;
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
        let mut at = AtCount {
            producers,
            runs: Default::default(),
            backlog_max: [0; 5],
        };
        for round in 0..args.rounds {
            let mut order = variants.clone();
            if (k + round as usize) % 2 == 1 {
                order.reverse();
            }
            for v in order {
                let i = index(v);
                let schema = schemas[i].as_ref().expect("set up");
                let tps = run_variant(&pool, schema, v, producers, &args).await?;
                let mut note = String::new();
                if let Some(relay) = relays[i].as_mut() {
                    relay.check_running()?;
                    let left = pending(&pool, schema).await?;
                    at.backlog_max[i] = at.backlog_max[i].max(left);
                    note = format!(" (relay {left} events behind at the end)");
                    catch_up(relay, &pool, schema).await?;
                }
                eprintln!(
                    "bench produce: {producers} producers, round {} ({}) {}: {tps:.0} tx/s{note}",
                    round + 1,
                    v.letter(),
                    v.schema()
                );
                at.runs[i].push(tps);
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
    println!("  (b) plain INSERT, no trigger (the reference)");
    println!("  (a) enqueue + coalesced wake-up");
    println!("  (c) plain INSERT + the seed's per-row NOTIFY trigger");
    println!("  (d) plain INSERT, default migrate (idle wake-up trigger), `outbox relay` running");
    if args.relay_reference {
        println!("  (e) plain INSERT, no trigger, `outbox relay` running");
    }
    let mut header = format!(
        "  {:>9} {:>10} {:>10} {:>5} {:>10} {:>5} {:>10} {:>5} {:>11}",
        "producers",
        "(b) tx/s",
        "(a) tx/s",
        "a/b",
        "(c) tx/s",
        "c/b",
        "(d) tx/s",
        "d/b",
        "(d) behind"
    );
    if args.relay_reference {
        header += &format!(
            " {:>10} {:>5} {:>5} {:>11}",
            "(e) tx/s", "e/b", "d/e", "(e) behind"
        );
    }
    println!("{header}");
    let mut rows = Vec::new();
    for at in &counts {
        let tps = |v| at.tps(v).expect("measured");
        let (b, a, c, d) = (
            tps(Variant::Plain),
            tps(Variant::Enqueue),
            tps(Variant::Trigger),
            tps(Variant::IdleRelay),
        );
        let e = at.tps(Variant::PlainRelay);
        let mut line = format!(
            "  {:>9} {b:>10.0} {a:>10.0} {:>5.2} {c:>10.0} {:>5.2} {d:>10.0} {:>5.2} {:>11}",
            at.producers,
            a / b,
            c / b,
            d / b,
            at.backlog_max[index(Variant::IdleRelay)]
        );
        if let Some(e) = e {
            line += &format!(
                " {e:>10.0} {:>5.2} {:>5.2} {:>11}",
                e / b,
                d / e,
                at.backlog_max[index(Variant::PlainRelay)]
            );
        }
        println!("{line}");
        rows.push(json!({
            "producers": at.producers,
            "plain_tps": b,
            "enqueue_tps": a,
            "trigger_tps": c,
            "idle_relay_tps": d,
            "a_over_b": a / b,
            "c_over_b": c / b,
            "d_over_b": d / b,
            "idle_relay_backlog_max": at.backlog_max[index(Variant::IdleRelay)],
            "plain_relay_tps": e,
            "e_over_b": e.map(|e| e / b),
            "d_over_e": e.map(|e| d / e),
            "plain_relay_backlog_max": e.map(|_| at.backlog_max[index(Variant::PlainRelay)]),
        }));
    }
    for s in schemas.iter().flatten() {
        sqlx::raw_sql(&format!("DROP SCHEMA {} CASCADE", s.name()))
            .execute(&pool)
            .await?;
    }
    Ok(json!({
        "scenario": "produce",
        "producers": args.producers,
        "seconds": args.seconds,
        "rounds": args.rounds,
        "by_producers": rows,
    }))
}
