//! `bench held-snapshot`: a steady plain-SQL producer and `outbox relay` as
//! a child process; after a normal spell, one `REPEATABLE READ` transaction
//! holds its snapshot (as a long report or `pg_dump` would), so nothing the
//! relay deletes can be vacuumed. Reports how the database's CPU per event
//! during the last minute of the hold compares with the minute before the
//! hold, and the oldest pending age throughout.
//!
//! The database's CPU is read per server process and put in classes by the
//! session's `application_name`: the relay's, the producers', autovacuum,
//! other server processes, and this bench's own samples (the observer),
//! which are shown but not counted.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use clap::Args;
use outbox::{Schema, Status, WakeupTrigger};
use serde_json::json;
use sqlx::PgPool;

use super::child_relay::{ChildRelay, Output, RELAY_APPLICATION_NAME};
use super::{fetch_i64, fresh_schema, Server};
use crate::ctx::Ctx;

/// Events per producing transaction (as in a pgbench script of 10 inserts).
const EVENTS_PER_TX: u64 = 10;

/// The window compared: the last this many seconds of the hold against as
/// many before it (less when `--before` or `--hold` is shorter).
const WINDOW: Duration = Duration::from_secs(60);

#[derive(Debug, Args)]
pub struct HeldSnapshotArgs {
    /// Events per second, produced by plain SQL in transactions of 10, 10
    /// to 20000.
    #[arg(long, default_value_t = 2_000, value_parser = clap::value_parser!(u64).range(10..=20_000))]
    pub rate: u64,
    /// Seconds of normal flow before the snapshot is taken, 10 to 3600
    /// (the comparison uses the last minute of it).
    #[arg(long, default_value_t = 90, value_parser = clap::value_parser!(u64).range(10..=3_600))]
    pub before: u64,
    /// Seconds the snapshot is held, 10 to 7200.
    #[arg(long, default_value_t = 300, value_parser = clap::value_parser!(u64).range(10..=7_200))]
    pub hold: u64,
    /// Run the relay in retention mode (`--keep-processed`).
    #[arg(long)]
    pub keep_processed: bool,
    /// Seconds between the printed samples, 1 to 600.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=600))]
    pub sample_every: u64,
    /// Distinct aggregates the events spread over, 1 to 1000000.
    #[arg(long, default_value_t = 5_000, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub aggregates: u64,
}

/// CPU seconds used so far by every thread of process `pid`, from
/// `/proc/PID/task/*/schedstat` (`None` if the process is not on this
/// machine or is gone).
pub(super) fn cpu_seconds(pid: u32) -> Option<f64> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).ok()?;
    let mut ns = 0u64;
    for task in tasks.flatten() {
        // A thread that ended since the listing is skipped, not the sample.
        let Ok(stat) = std::fs::read_to_string(task.path().join("schedstat")) else {
            continue;
        };
        ns += stat.split_whitespace().next()?.parse::<u64>().ok()?;
    }
    Some(ns as f64 / 1e9)
}

/// Who spent the database's CPU: each server process is put in one class
/// by its `pg_stat_activity` row.
pub(super) const CLASSES: [&str; 5] = ["relay", "producers", "autovacuum", "other", "observer"];

/// The `application_name` of this bench's producer sessions.
const PRODUCER_APPLICATION_NAME: &str = "outbox-bench-producer";

/// The `application_name` of this bench's own sessions (samples, the held
/// snapshot): not part of what is measured.
const OBSERVER_APPLICATION_NAME: &str = "outbox-bench-observer";

/// The class of a server process (an index into [`CLASSES`]).
fn class_of(backend_type: &str, application_name: &str) -> usize {
    match (backend_type, application_name) {
        (_, RELAY_APPLICATION_NAME) => 0,
        (_, PRODUCER_APPLICATION_NAME) => 1,
        (b, _) if b.starts_with("autovacuum") => 2,
        (_, OBSERVER_APPLICATION_NAME) => 4,
        _ => 3,
    }
}

/// The database's CPU so far, by class: every server process it lists
/// (backends and background workers), by pid, so a process that ends only
/// stops counting.
pub(super) async fn database_cpu(
    pool: &PgPool,
    seen: &mut HashMap<u32, (usize, f64)>,
) -> Result<Option<[f64; CLASSES.len()]>> {
    let rows: Vec<(i32, String, String)> = sqlx::query_as(
        "SELECT pid, coalesce(backend_type, ''), coalesce(application_name, '')
         FROM pg_stat_activity",
    )
    .fetch_all(pool)
    .await?;
    let mut any = false;
    for (pid, backend_type, application_name) in rows {
        if let Some(s) = cpu_seconds(pid as u32) {
            seen.insert(pid as u32, (class_of(&backend_type, &application_name), s));
            any = true;
        }
    }
    let mut by_class = [0.0; CLASSES.len()];
    for (class, s) in seen.values() {
        by_class[*class] += s;
    }
    Ok(any.then_some(by_class))
}

/// CPU of the system measured: every class but the observer's.
fn measured(by_class: &[f64; CLASSES.len()]) -> f64 {
    by_class[..CLASSES.len() - 1].iter().sum()
}

struct Sample {
    at: Duration,
    produced: u64,
    db_cpu: Option<[f64; CLASSES.len()]>,
    relay_cpu: Option<f64>,
    pending: i64,
    oldest_ms: f64,
    dead_tuples: i64,
    held: bool,
}

pub async fn run(ctx: &Ctx, fsync: bool, args: HeldSnapshotArgs) -> Result<serde_json::Value> {
    let server = Server::start(ctx, fsync).await?;
    let pool = server.named_pool(4, OBSERVER_APPLICATION_NAME).await?;
    let producers = server.named_pool(8, PRODUCER_APPLICATION_NAME).await?;
    let schema = fresh_schema(&pool, "bench_held", WakeupTrigger::Idle).await?;
    let mut relay = ChildRelay::spawn_with(
        &server.url,
        &schema,
        "held",
        Output::Discard,
        if args.keep_processed {
            &["--keep-processed"]
        } else {
            &[]
        },
    )?;
    let total = Duration::from_secs(args.before + args.hold);
    let hold_at = Duration::from_secs(args.before);
    eprintln!(
        "bench held-snapshot: {} events/s for {} s, snapshot held from {} s to the end ({} mode)",
        args.rate,
        total.as_secs(),
        args.before,
        if args.keep_processed {
            "retention"
        } else {
            "delete-on-ack"
        }
    );

    let producer = tokio::spawn(produce(
        producers.clone(),
        schema.clone(),
        args.rate,
        args.aggregates,
        total,
    ));
    let observed = observe(&pool, &schema, &mut relay, &args, total, hold_at).await?;
    producer.await.context("producer task")??;
    relay.stop().await?;

    let window = WINDOW
        .min(Duration::from_secs(args.before))
        .min(Duration::from_secs(args.hold));
    let cpu = CpuPerEvent {
        before_by_class: cpu_per_event(&observed.samples, hold_at.saturating_sub(window), hold_at),
        end_by_class: cpu_per_event(&observed.samples, total.saturating_sub(window), total),
    };
    print_held(&args, &observed, &cpu);
    Ok(summary(&args, &observed, &cpu))
}

/// What the run saw: the samples, and the oldest pending event's age
/// checked every second.
struct Observed {
    samples: Vec<Sample>,
    /// The most the oldest pending event had waited, over the run (ms).
    max_oldest_ms: f64,
    /// The same while the snapshot was held (ms).
    max_oldest_held_ms: f64,
}

/// Watches the run for `total`: the outbox's status every second, a
/// sample every `--sample-every` seconds (printed as it is taken), and the
/// snapshot taken at `hold_at` and held to the end, then let go.
async fn observe(
    pool: &PgPool,
    schema: &Schema,
    relay: &mut ChildRelay,
    args: &HeldSnapshotArgs,
    total: Duration,
    hold_at: Duration,
) -> Result<Observed> {
    let started = Instant::now();
    let mut holder = None;
    let mut observed = Observed {
        samples: Vec::new(),
        max_oldest_ms: 0.0,
        max_oldest_held_ms: 0.0,
    };
    let mut cpu_seen = HashMap::new();
    let mut next_sample = Duration::ZERO;
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    while started.elapsed() < total {
        tick.tick().await;
        relay.check_running()?;
        let at = started.elapsed();
        if holder.is_none() && at >= hold_at {
            holder = Some(hold_snapshot(pool, at).await?);
        }
        let status = {
            let mut conn = pool.acquire().await?;
            Status::read(&mut conn, schema).await?
        };
        let oldest_ms = status.oldest_pending_age_seconds.unwrap_or(0.0).max(0.0) * 1e3;
        observed.max_oldest_ms = observed.max_oldest_ms.max(oldest_ms);
        if holder.is_some() {
            observed.max_oldest_held_ms = observed.max_oldest_held_ms.max(oldest_ms);
        }
        if at >= next_sample {
            next_sample += Duration::from_secs(args.sample_every);
            let (dead_tuples, produced, db_cpu) =
                server_figures(pool, schema, &mut cpu_seen).await?;
            let sample = Sample {
                at,
                produced,
                db_cpu,
                relay_cpu: cpu_seconds(relay.pid()),
                pending: status.pending,
                oldest_ms,
                dead_tuples,
                held: holder.is_some(),
            };
            print_sample(observed.samples.last(), &sample);
            observed.samples.push(sample);
        }
    }
    if let Some(mut conn) = holder.take() {
        sqlx::raw_sql("COMMIT").execute(&mut *conn).await?;
    }
    Ok(observed)
}

/// A connection holding a snapshot (a repeatable-read transaction that
/// has read), taken `at` into the run: what keeps the server from
/// removing the dead rows of every table.
async fn hold_snapshot(
    pool: &PgPool,
    at: Duration,
) -> Result<sqlx::pool::PoolConnection<sqlx::Postgres>> {
    let mut conn = pool.acquire().await?;
    sqlx::raw_sql("BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT count(*) FROM pg_class;")
        .execute(&mut *conn)
        .await?;
    eprintln!(
        "bench held-snapshot: snapshot taken at {:.0} s",
        at.as_secs_f64()
    );
    Ok(conn)
}

/// What a sample reads of the server: the events table's dead tuples, the
/// events produced so far (the seq's last value), and the database's CPU
/// by class.
async fn server_figures(
    pool: &PgPool,
    schema: &Schema,
    cpu_seen: &mut HashMap<u32, (usize, f64)>,
) -> Result<(i64, u64, Option<[f64; CLASSES.len()]>)> {
    let dead_tuples: i64 = sqlx::query_scalar(
        "SELECT coalesce(sum(n_dead_tup), 0)::bigint FROM pg_stat_user_tables
         WHERE schemaname = $1 AND relname = 'outbox_events'",
    )
    .bind(schema.name())
    .fetch_one(pool)
    .await?;
    let produced = fetch_i64(
        pool,
        &format!(
            "SELECT coalesce(pg_sequence_last_value('{}.outbox_events_seq_seq'), 0)",
            schema.name()
        ),
    )
    .await?;
    let db_cpu = database_cpu(pool, cpu_seen).await?;
    Ok((dead_tuples, produced as u64, db_cpu))
}

/// The database's CPU per event (µs) by class, in the window before the
/// hold and in the hold's last one.
struct CpuPerEvent {
    before_by_class: Option<[f64; CLASSES.len()]>,
    end_by_class: Option<[f64; CLASSES.len()]>,
}

impl CpuPerEvent {
    /// Before the hold, the classes counted.
    fn before(&self) -> Option<f64> {
        self.before_by_class.as_ref().map(measured)
    }

    /// At the hold's end, the classes counted.
    fn end(&self) -> Option<f64> {
        self.end_by_class.as_ref().map(measured)
    }

    /// The end's over the before's: what holding the snapshot costs.
    fn ratio(&self) -> Option<f64> {
        match (self.before(), self.end()) {
            (Some(b), Some(e)) if b > 0.0 => Some(e / b),
            _ => None,
        }
    }
}

/// CPU per event (µs) between the first and the last sample of the window
/// `from`..=`to`, by class.
fn cpu_per_event(samples: &[Sample], from: Duration, to: Duration) -> Option<[f64; CLASSES.len()]> {
    let a = samples.iter().find(|s| s.at >= from && s.at <= to)?;
    let b = samples.iter().rev().find(|s| s.at <= to && s.at > a.at)?;
    let events = b.produced.checked_sub(a.produced).filter(|n| *n > 0)? as f64;
    let (a_cpu, b_cpu) = (a.db_cpu?, b.db_cpu?);
    Some(std::array::from_fn(|c| {
        (b_cpu[c] - a_cpu[c]) / events * 1e6
    }))
}

/// The report on stdout: the CPU per event before and at the end of the
/// hold, by class, and the oldest pending event's age.
fn print_held(args: &HeldSnapshotArgs, observed: &Observed, cpu: &CpuPerEvent) {
    let shown = |v: Option<f64>| v.map_or("n/a".to_owned(), |v| format!("{v:.1}"));
    println!(
        "bench held-snapshot ({} events/s, held {} s):",
        args.rate, args.hold
    );
    println!(
        "  database CPU per event: {} µs the minute before the hold, {} µs its last minute (ratio {})",
        shown(cpu.before()),
        shown(cpu.end()),
        cpu.ratio().map_or("n/a".to_owned(), |r| format!("{r:.2}"))
    );
    for (c, name) in CLASSES.iter().enumerate() {
        println!(
            "    {name:<10} {} µs before, {} µs at the end{}",
            shown(cpu.before_by_class.map(|b| b[c])),
            shown(cpu.end_by_class.map(|e| e[c])),
            if *name == "observer" {
                " (this bench's samples: not counted)"
            } else {
                ""
            }
        );
    }
    println!(
        "  oldest pending: at most {:.0} ms while held ({:.0} ms over the run, sampled every second)",
        observed.max_oldest_held_ms, observed.max_oldest_ms
    );
}

/// The run's JSON summary (`bench --json`), every sample with it.
fn summary(args: &HeldSnapshotArgs, observed: &Observed, cpu: &CpuPerEvent) -> serde_json::Value {
    json!({
        "scenario": "held-snapshot",
        "rate": args.rate,
        "hold_seconds": args.hold,
        "retention": args.keep_processed,
        "db_cpu_us_per_event_before": cpu.before(),
        "db_cpu_us_per_event_end_of_hold": cpu.end(),
        "ratio": cpu.ratio(),
        "by_class_us_per_event": CLASSES.iter().enumerate().map(|(c, name)| json!({
            "class": name,
            "before": cpu.before_by_class.map(|b| b[c]),
            "end_of_hold": cpu.end_by_class.map(|e| e[c]),
        })).collect::<Vec<_>>(),
        "max_oldest_pending_ms_held": observed.max_oldest_held_ms,
        "max_oldest_pending_ms": observed.max_oldest_ms,
        "samples": observed.samples.iter().map(|s| json!({
            "at_s": s.at.as_secs_f64(), "produced": s.produced,
            "db_cpu_s": s.db_cpu.as_ref().map(measured),
            "db_cpu_s_by_class": s.db_cpu,
            "relay_cpu_s": s.relay_cpu, "pending": s.pending, "oldest_pending_ms": s.oldest_ms,
            "dead_tuples": s.dead_tuples, "held": s.held,
        })).collect::<Vec<_>>(),
    })
}

fn print_sample(previous: Option<&Sample>, s: &Sample) {
    let cores = |f: &dyn Fn(&Sample) -> Option<f64>| -> String {
        match previous.and_then(|p| Some((f(s)? - f(p)?) / (s.at - p.at).as_secs_f64())) {
            Some(cores) => format!("{cores:.2}"),
            None => "-".to_owned(),
        }
    };
    let class = |c: usize| cores(&move |s: &Sample| s.db_cpu.map(|d| d[c]));
    eprintln!(
        "  {:>5.0} s {}  db cpu {} cores (relay {}, producers {}, autovacuum {}, other {}; observer {})  relay process {} cores  pending {:>6}  oldest {:>6.0} ms  dead tuples {:>8}",
        s.at.as_secs_f64(),
        if s.held { "held" } else { "    " },
        cores(&|s: &Sample| s.db_cpu.as_ref().map(measured)),
        class(0),
        class(1),
        class(2),
        class(3),
        class(4),
        cores(&|s: &Sample| s.relay_cpu),
        s.pending,
        s.oldest_ms,
        s.dead_tuples
    );
}

/// Inserts `rate` events a second in transactions of [`EVENTS_PER_TX`]
/// until `total` has passed, several transactions in flight when commits
/// are slow (open loop: the schedule does not wait for the database).
async fn produce(
    pool: PgPool,
    schema: Schema,
    rate: u64,
    aggregates: u64,
    total: Duration,
) -> Result<()> {
    const IN_FLIGHT: usize = 6;
    let sql: std::sync::Arc<str> = format!(
        "INSERT INTO {}.outbox_events (aggregate_type, aggregate_id, event_type, payload)
         SELECT 'order', 'order-' || ((random() * $1)::bigint), 'order.created',
                jsonb_build_object('n', g, 'note', repeat('x', 60))
         FROM generate_series(1, {EVENTS_PER_TX}) g",
        schema.name()
    )
    .into();
    let every = Duration::from_secs_f64(EVENTS_PER_TX as f64 / rate as f64);
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let mut tasks = tokio::task::JoinSet::new();
    let started = Instant::now();
    while started.elapsed() < total {
        tick.tick().await;
        while tasks.len() >= IN_FLIGHT {
            tasks.join_next().await.context("producer task")???;
        }
        let (pool, sql) = (pool.clone(), sql.clone());
        tasks.spawn(async move {
            sqlx::query(&sql)
                .bind(aggregates as i64)
                .execute(&pool)
                .await
                .map(|_| ())
        });
    }
    while let Some(done) = tasks.join_next().await {
        done.context("producer task")??;
    }
    Ok(())
}
