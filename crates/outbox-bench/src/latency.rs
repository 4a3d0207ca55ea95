//! `bench latency`: commit-to-delivery latency under an open-loop producer
//! (a fixed schedule, so a slow relay cannot slow the producer and hide its
//! own latency).
//!
//! Two setups:
//! - `--producer library` (the default): the library's `enqueue` and
//!   `wake()`, an embedded relay publishing to a broker that notes when each
//!   event reached it.
//! - `--producer sql`: what a service in any language gets — plain-SQL
//!   transactions on connections of their own, no `wake()`, the schema
//!   migrated with a wake-up trigger (default: the default of `outbox
//!   migrate`), and `outbox relay --publisher stdout` as a child process
//!   that has been idle for a while when the schedule starts; an event is
//!   delivered when its JSON line is read from the relay's standard output.
//!
//! Longer than most files: the two setups share the schedule, the timing
//! and the report, which is why they stay together.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{ensure, Result};
use async_trait::async_trait;
use clap::{Args, ValueEnum};
use outbox::{
    Event, NewEvent, Outbox, Outcome, Publisher, Relay, RelayConfig, Schema, Unavailable,
    WakeupTrigger,
};
use serde_json::json;
use sqlx::PgPool;
use uuid::Uuid;

use super::child_relay::{ChildRelay, Lines, Output};
use super::recvlogical;
use super::relay_cpu::{core_share, cpu_report, Cpu};
use super::stats::{ms, quantile};
use super::{
    create_orders, fresh_schema, fresh_wal_schema, insert_order, order_insert, warm_up, Server,
};
use crate::ctx::Ctx;

/// Most events one run may produce (`--rate` × `--seconds`): every commit
/// and acknowledgement time is kept in memory until the end.
pub const MAX_EVENTS: u64 = 1_000_000;

/// How long the events may take to arrive once the schedule has ended.
const DELIVERY_DEADLINE: Duration = Duration::from_secs(60);

/// Who writes the events, and where the relay runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Producer {
    /// `Outbox::enqueue` then `wake()`, with an embedded relay.
    Library,
    /// Plain SQL, no wake-up call, `outbox relay` as a child process.
    Sql,
}

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
    /// `wal`: the schema in the WAL mode; with `--producer sql` producers
    /// call `outbox_emit(...)` and the child relay reads the slot (its CPU
    /// includes its walsender). Left out: the table mode.
    #[arg(long, value_name = "MODE")]
    pub mode: Option<outbox::DeliveryMode>,
    /// `library`: `enqueue` + `wake()` and an embedded relay. `sql`: plain
    /// SQL on connections of their own, no wake-up call, and `outbox relay
    /// --publisher stdout` as a child process (latency = the line read from
    /// its output minus the moment COMMIT returned).
    #[arg(long, value_enum, default_value_t = Producer::Library)]
    pub producer: Producer,
    /// The schema's wake-up trigger, as `outbox migrate --wakeup-trigger`:
    /// idle, every-insert or off [default: idle with --producer sql, off
    /// with --producer library].
    #[arg(long, value_name = "MODE")]
    pub wakeup_trigger: Option<WakeupTrigger>,
    /// With --producer sql: seconds the relay has been idle (its idle
    /// announcement live) when the schedule starts, 2 to 3600.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u64).range(2..=3_600))]
    pub idle_secs: u64,
    /// With --producer sql: the child relay's `--latency-budget-ms`, to
    /// measure CPU per event against latency at another budget [default:
    /// the relay's].
    #[arg(long, value_name = "MS", value_parser = clap::value_parser!(u64).range(1..=1_000))]
    pub latency_budget_ms: Option<u64>,
}

impl LatencyArgs {
    fn wakeup(&self) -> WakeupTrigger {
        self.wakeup_trigger.unwrap_or(match self.producer {
            // As before: the library wakes its embedded relay itself.
            Producer::Library => WakeupTrigger::Off,
            // What the default `outbox migrate` installs.
            Producer::Sql => WakeupTrigger::default(),
        })
    }
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

/// What one run observed.
struct Observed {
    /// Each event and the moment its COMMIT returned, in schedule order.
    committed: Vec<(Uuid, Instant)>,
    /// Each event and the moment it was first delivered.
    delivered: HashMap<Uuid, Instant>,
    /// Transactions that started more than 5 ms after their due time.
    late: u64,
    /// Transactions whose BEGIN returned more than 5 ms after their due
    /// time (they waited for a connection or for the server).
    late_begins: u64,
    /// From the first due time to the last commit.
    produce_secs: f64,
    /// Deliveries of an event already delivered (child relay only).
    duplicates: Option<u64>,
    /// The child relay's CPU (process and database sessions) while idle
    /// and while the schedule ran until the last delivery.
    cpu: Option<RelayCpu>,
}

/// The child relay's CPU in one run.
struct RelayCpu {
    /// Share of one core while idle, before the schedule.
    idle_core_share: f64,
    /// Per event and as a share of a core, from the schedule's start to the
    /// last delivery.
    busy: serde_json::Value,
    /// The WAL mode's reference (`pg_recvlogical` and its walsender) at the
    /// same rate.
    reference: Option<recvlogical::AtRate>,
}

impl Observed {
    /// What a run observed: what its `schedule` did, the first delivery of
    /// each event and, for the child relay, the redeliveries.
    fn new(
        schedule: Schedule,
        delivered: HashMap<Uuid, Instant>,
        duplicates: Option<u64>,
        cpu: Option<RelayCpu>,
    ) -> Self {
        let (committed, late, late_begins, produce_secs) = schedule;
        Observed {
            committed,
            delivered,
            late,
            late_begins,
            produce_secs,
            duplicates,
            cpu,
        }
    }
}

/// The order transaction's event payload for order `id`.
fn payload(id: i64) -> serde_json::Value {
    json!({"order_id": id, "customer_id": id % 977, "total_cents": (id * 7919) % 100_000})
}

/// What the schedule did: each event and when its COMMIT returned, the
/// transactions started late, those that began late, the seconds it took.
pub(super) type Schedule = (Vec<(Uuid, Instant)>, u64, u64, f64);

/// Runs `commit(i)` for i in 0..total, one every 1/rate s from now, each on
/// a task of its own. Each returns its event, when its COMMIT returned and
/// when its BEGIN returned.
pub(super) async fn open_loop<F, Fut>(rate: u32, total: u64, commit: F) -> Result<Schedule>
where
    F: Fn(i64) -> Fut,
    Fut: Future<Output = Result<(Uuid, Instant, Instant)>> + Send + 'static,
{
    let interval = Duration::from_secs_f64(1.0 / f64::from(rate));
    let start = tokio::time::Instant::now();
    let mut late = 0u64;
    let mut tasks = Vec::with_capacity(total as usize);
    for i in 0..total {
        let due = start + interval.mul_f64(i as f64);
        tokio::time::sleep_until(due).await;
        if tokio::time::Instant::now() - due > Duration::from_millis(5) {
            late += 1;
        }
        tasks.push(tokio::spawn(commit(i as i64)));
    }
    let mut committed = Vec::with_capacity(total as usize);
    let mut late_begins = 0u64;
    let start = start.into_std();
    for (i, t) in tasks.into_iter().enumerate() {
        let (id, at, began) = t.await??;
        let due = start + interval.mul_f64(i as f64);
        if began.saturating_duration_since(due) > Duration::from_millis(5) {
            late_begins += 1;
        }
        committed.push((id, at));
    }
    Ok((committed, late, late_begins, start.elapsed().as_secs_f64()))
}

/// `--producer library`: `enqueue` + `wake()`, an embedded relay.
async fn library(
    pool: &PgPool,
    schema: &Schema,
    args: &LatencyArgs,
    total: u64,
) -> Result<Observed> {
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

    eprintln!(
        "bench latency: {} tx/s for {} s (library, embedded relay)",
        args.rate, args.seconds
    );
    let orders = order_insert(schema);
    let schedule = open_loop(args.rate, total, |id| {
        let (pool, outbox, orders) = (pool.clone(), outbox.clone(), orders.clone());
        async move {
            let event = NewEvent::json("order", id.to_string(), "order.created", payload(id));
            let mut tx = pool.begin().await?;
            let began = Instant::now();
            insert_order(&mut tx, &orders, id).await?;
            outbox.enqueue(&mut *tx, &event).await?;
            tx.commit().await?;
            let at = Instant::now();
            outbox.wake();
            Ok((event.id, at, began))
        }
    })
    .await?;
    let deadline = Instant::now() + DELIVERY_DEADLINE;
    while relay.stats().delivered < total && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    relay.shutdown().await?;
    let delivered = std::mem::take(&mut *clock.acked.lock().expect("lock"));
    Ok(Observed::new(schedule, delivered, None, None))
}

/// `--producer sql`: plain-SQL transactions on connections of their own,
/// `outbox relay --publisher stdout` as a child process.
async fn sql(
    server: &Server,
    pool: &PgPool,
    schema: &Schema,
    args: &LatencyArgs,
    total: u64,
) -> Result<Observed> {
    // A server that falls behind the schedule makes transactions wait for
    // a connection (counted as late), not fail.
    let producers = server
        .producer_pool(
            args.connections,
            Duration::from_secs(args.seconds) + DELIVERY_DEADLINE,
        )
        .await?;
    warm_up(&producers, args.connections).await?;
    let mut relay = idle_relay(server, pool, schema, args).await?;
    let mut cpu = Cpu::default();
    let (idle_core_share, busy_from) = idle_core_share(&mut cpu, pool, &mut relay, args).await?;

    eprintln!(
        "bench latency: {} tx/s for {} s (plain SQL, child relay idle {} s, wake-up trigger {})",
        args.rate,
        args.seconds,
        args.idle_secs,
        args.wakeup().name()
    );
    let orders = order_insert(schema);
    let event = event_insert(schema, args.mode);
    let commit = |id: i64| {
        let (pool, orders, event) = (producers.clone(), orders.clone(), event.clone());
        async move {
            let mut tx = pool.begin().await?;
            let began = Instant::now();
            insert_order(&mut tx, &orders, id).await?;
            let event_id: Uuid = sqlx::query_scalar(&event)
                .bind("order")
                .bind(id.to_string())
                .bind("order.created")
                .bind(sqlx::types::Json(payload(id)))
                .fetch_one(&mut *tx)
                .await?;
            tx.commit().await?;
            Ok((event_id, Instant::now(), began))
        }
    };
    let schedule = open_loop(args.rate, total, commit).await?;
    let lines = relay.lines().expect("timed output").clone();
    lines_read(&mut relay, &lines, total).await?;
    let busy = cpu_report(
        busy_from.0,
        cpu.now(pool, &relay).await?,
        total,
        busy_from.1.elapsed().as_secs_f64(),
    );
    let delivered = stopped(relay, &lines).await?;
    let reference = if args.mode == Some(outbox::DeliveryMode::Wal) {
        Some(recvlogical_reference(server, pool, schema, args, total, commit).await?)
    } else {
        None
    };
    producers.close().await;
    let duplicates = lines.duplicates.load(std::sync::atomic::Ordering::Relaxed);
    let cpu = RelayCpu {
        idle_core_share,
        busy,
        reference,
    };
    Ok(Observed::new(
        schedule,
        delivered,
        Some(duplicates),
        Some(cpu),
    ))
}

/// The child relay, its lines timed, once it is idle.
async fn idle_relay(
    server: &Server,
    pool: &PgPool,
    schema: &Schema,
    args: &LatencyArgs,
) -> Result<ChildRelay> {
    let budget = args.latency_budget_ms.map(|ms| ms.to_string());
    let extra: Vec<&str> = match &budget {
        Some(ms) => vec!["--latency-budget-ms", ms],
        None => vec![],
    };
    let mut relay = ChildRelay::spawn_with(
        &server.url,
        schema,
        "bench-latency-relay",
        Output::Timed,
        &extra,
    )?;
    relay
        .wait_idle(pool, schema, Duration::from_secs(60))
        .await?;
    Ok(relay)
}

/// A CPU reading of the child relay (process, sessions), and when.
type Reading = ((f64, f64), Instant);

/// The relay's share of a core over `--idle-secs` with nothing to do, and
/// the reading the busy figures start from.
async fn idle_core_share(
    cpu: &mut Cpu,
    pool: &PgPool,
    relay: &mut ChildRelay,
    args: &LatencyArgs,
) -> Result<(f64, Reading)> {
    let idle_from = (cpu.now(pool, relay).await?, Instant::now());
    tokio::time::sleep(Duration::from_secs(args.idle_secs)).await;
    relay.check_running()?;
    let busy_from = (cpu.now(pool, relay).await?, Instant::now());
    let share = core_share(
        idle_from.0,
        busy_from.0,
        (busy_from.1 - idle_from.1).as_secs_f64(),
    );
    Ok((share, busy_from))
}

/// The statement that writes an order's event: a row in the table mode,
/// `outbox_emit` in the WAL mode. Every other column of the event has a
/// default, as for any producer.
fn event_insert(schema: &Schema, mode: Option<outbox::DeliveryMode>) -> Arc<str> {
    let s = schema.name();
    match mode {
        Some(outbox::DeliveryMode::Wal) => format!("SELECT {s}.outbox_emit($1, $2, $3, $4)"),
        _ => format!(
            "INSERT INTO {s}.outbox_events (aggregate_type, aggregate_id, event_type, payload)
             VALUES ($1, $2, $3, $4) RETURNING id"
        ),
    }
    .into()
}

/// Waits until the relay has printed a line for each of `total` events, or
/// [`DELIVERY_DEADLINE`] has passed.
async fn lines_read(relay: &mut ChildRelay, lines: &Lines, total: u64) -> Result<()> {
    let deadline = Instant::now() + DELIVERY_DEADLINE;
    while lines.distinct.load(std::sync::atomic::Ordering::Relaxed) < total
        && Instant::now() < deadline
    {
        relay.check_running()?;
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    Ok(())
}

/// Stops the relay: each event and when its first line was read. Every
/// line must have been an event's JSON.
async fn stopped(relay: ChildRelay, lines: &Lines) -> Result<HashMap<Uuid, Instant>> {
    let status = relay.stop().await?;
    if !status.success() {
        eprintln!("bench latency: the child relay ended with {status}");
    }
    let unparsed = lines.unparsed.load(std::sync::atomic::Ordering::Relaxed);
    ensure!(
        unparsed == 0,
        "the relay printed {unparsed} lines that are not an event's JSON"
    );
    Ok(std::mem::take(&mut *lines.first_seen.lock().expect("lock")))
}

/// The WAL mode's reference at the same rate: pg_recvlogical on a slot of
/// its own, the same schedule (the next order ids).
async fn recvlogical_reference<F, Fut>(
    server: &Server,
    pool: &PgPool,
    schema: &Schema,
    args: &LatencyArgs,
    total: u64,
    commit: F,
) -> Result<recvlogical::AtRate>
where
    F: Fn(i64) -> Fut,
    Fut: Future<Output = Result<(Uuid, Instant, Instant)>> + Send + 'static,
{
    eprintln!("bench latency: the same schedule read by pg_recvlogical (the reference)");
    let offset = total as i64;
    let schedule = async {
        open_loop(args.rate, total, |id| commit(id + offset)).await?;
        Ok(())
    };
    recvlogical::at_rate(
        &server.url,
        pool,
        &outbox::default_slot_name(schema)?,
        Duration::from_secs(args.idle_secs),
        total,
        schedule,
    )
    .await
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
    let schema = latency_schema(&pool, &args).await?;
    create_orders(&pool, &schema).await?;

    let observed = match args.producer {
        Producer::Library => library(&pool, &schema, &args, total).await?,
        Producer::Sql => sql(&server, &pool, &schema, &args, total).await?,
    };
    let latencies = Latencies::of(&observed);
    ensure!(
        latencies.sorted.len() as u64 == total,
        "only {} of {total} events were delivered",
        latencies.sorted.len()
    );
    print_latency(&args, total, &observed, &latencies);
    sqlx::raw_sql("DROP SCHEMA bench_latency CASCADE")
        .execute(&pool)
        .await?;
    super::drop_slot(&pool, &schema).await?;
    Ok(summary(&args, total, &observed, &latencies))
}

/// The run's schema, in the mode `--mode` names (the WAL mode only with
/// the plain-SQL producer: its relay runs as its own process).
async fn latency_schema(pool: &PgPool, args: &LatencyArgs) -> Result<Schema> {
    let wakeup = args.wakeup();
    if args.mode == Some(outbox::DeliveryMode::Wal) {
        ensure!(
            args.producer == Producer::Sql,
            "--mode wal needs --producer sql (the relay runs as its own process)"
        );
    }
    Ok(match args.mode {
        Some(outbox::DeliveryMode::Wal) => fresh_wal_schema(pool, "bench_latency", wakeup).await?,
        _ => fresh_schema(pool, "bench_latency", wakeup).await?,
    })
}

/// Each delivered event's latency from its commit, sorted.
struct Latencies {
    sorted: Vec<Duration>,
    /// Events delivered before their commit returned to the client,
    /// counted as 0: the relay can see a commit before the client hears
    /// of it.
    early: u64,
}

impl Latencies {
    fn of(observed: &Observed) -> Latencies {
        let mut early = 0u64;
        let mut sorted: Vec<Duration> = observed
            .committed
            .iter()
            .filter_map(|(id, at)| {
                let seen = observed.delivered.get(id)?;
                Some(seen.checked_duration_since(*at).unwrap_or_else(|| {
                    early += 1;
                    Duration::ZERO
                }))
            })
            .collect();
        sorted.sort();
        Latencies { sorted, early }
    }

    /// p50, p99, p99.9 and the most.
    fn quantiles(&self) -> (Duration, Duration, Duration, Duration) {
        let s = &self.sorted;
        (
            quantile(s, 0.50),
            quantile(s, 0.99),
            quantile(s, 0.999),
            *s.last().unwrap_or(&Duration::ZERO),
        )
    }
}

/// Events per second the producers achieved.
fn achieved(total: u64, observed: &Observed) -> f64 {
    total as f64 / observed.produce_secs
}

/// Whether the server kept the schedule (95 % of `--rate`): the latency
/// of a schedule it could not keep is the latency at the rate it did
/// keep.
fn schedule_kept(achieved: f64, rate: u32) -> bool {
    achieved >= 0.95 * f64::from(rate)
}

/// The report on stdout: the setup, the schedule, the quantiles, and the
/// relay's CPU when it ran as its own process.
fn print_latency(args: &LatencyArgs, total: u64, observed: &Observed, latencies: &Latencies) {
    let wakeup = args.wakeup();
    let (p50, p99, p999, max) = latencies.quantiles();
    let achieved = achieved(total, observed);
    let (setup, measured) = match args.producer {
        Producer::Library => (
            "library producer (enqueue + wake), embedded relay".to_owned(),
            "commit -> broker ack",
        ),
        Producer::Sql => (
            format!(
                "plain-SQL producer, child `outbox relay --publisher stdout` idle {} s before, wake-up trigger {}",
                args.idle_secs,
                wakeup.name()
            ),
            "commit -> line read from the relay's stdout",
        ),
    };
    println!("latency: {setup}");
    println!(
        "  {total} order transactions at {} /s (achieved {achieved:.0} /s; >5 ms late: {} started, {} had BEGIN return)",
        args.rate, observed.late, observed.late_begins
    );
    println!(
        "  {measured}: p50 {:.2} ms, p99 {:.2} ms, p99.9 {:.2} ms, max {:.2} ms",
        ms(p50),
        ms(p99),
        ms(p999),
        ms(max)
    );
    if !schedule_kept(achieved, args.rate) {
        println!(
            "  the server did not keep the schedule: these figures are for {achieved:.0} /s, not {} /s",
            args.rate
        );
    }
    if let Some(d) = observed.duplicates {
        println!(
            "  delivered {} of {total} ({d} delivered again)",
            latencies.sorted.len()
        );
    }
    if let Some(cpu) = &observed.cpu {
        print_relay_cpu(cpu);
    }
    if latencies.early > 0 {
        println!(
            "  ({} events were delivered before their commit returned to the client; counted as 0)",
            latencies.early
        );
    }
}

/// The child relay's CPU per event, and the reference's at the same rate.
fn print_relay_cpu(cpu: &RelayCpu) {
    let f = |k: &str| cpu.busy[k].as_f64().unwrap_or(f64::NAN);
    println!(
        "  relay cpu: {:.1} us/event ({:.1} process + {:.1} its sessions), {:.2} % of a core; idle before: {:.2} % of a core",
        f("relay_us_per_event"),
        f("relay_process_us_per_event"),
        f("relay_sessions_us_per_event"),
        f("relay_core_share") * 100.0,
        cpu.idle_core_share * 100.0
    );
    if let Some(r) = &cpu.reference {
        println!(
            "  pg_recvlogical at the same rate (the reference): {:.1} us/event ({:.1} process + {:.1} walsender); idle before: {:.2} % of a core",
            r.process_us_per_event + r.walsender_us_per_event,
            r.process_us_per_event,
            r.walsender_us_per_event,
            r.idle_core_share * 100.0
        );
    }
}

/// The run's JSON summary (`bench --json`).
fn summary(
    args: &LatencyArgs,
    total: u64,
    observed: &Observed,
    latencies: &Latencies,
) -> serde_json::Value {
    let (p50, p99, p999, max) = latencies.quantiles();
    let achieved = achieved(total, observed);
    json!({
        "scenario": "latency",
        "mode": args.mode.unwrap_or_default().name(),
        "producer": match args.producer { Producer::Library => "library", Producer::Sql => "sql" },
        "wakeup_trigger": args.wakeup().name(),
        "idle_secs": (args.producer == Producer::Sql).then_some(args.idle_secs),
        "latency_budget_ms": args.latency_budget_ms,
        "rate": args.rate,
        "achieved_rate": achieved,
        "events": total,
        "delivered": latencies.sorted.len(),
        "duplicates": observed.duplicates,
        "early": latencies.early,
        "late_starts": observed.late,
        "late_begins": observed.late_begins,
        "schedule_kept": schedule_kept(achieved, args.rate),
        "p50_ms": ms(p50),
        "p99_ms": ms(p99),
        "p999_ms": ms(p999),
        "max_ms": ms(max),
        "cpu": observed.cpu.as_ref().map(|c| c.busy.clone()),
        "idle_core_share": observed.cpu.as_ref().map(|c| c.idle_core_share),
        "reference": observed.cpu.as_ref().and_then(|c| c.reference).map(|r| json!({
            "client": "pg_recvlogical",
            "process_us_per_event": r.process_us_per_event,
            "walsender_us_per_event": r.walsender_us_per_event,
            "us_per_event": r.process_us_per_event + r.walsender_us_per_event,
            "idle_core_share": r.idle_core_share,
        })),
    })
}
