//! `bench e2e`: PostgreSQL to a real broker to a consumer that reads every
//! message back ([`consumer`]) and checks that none is missing and that each
//! aggregate's arrived in order ([`check`]); a loss or a reordering fails
//! the run.
//!
//! - Drain: `--events` events preloaded by plain SQL, `outbox relay
//!   --publisher SPEC` started as a child process ([`relay`]); the time
//!   until the consumer has them all, against the same messages published
//!   by the broker's own client ([`reference`]) and read back by the same
//!   consumer.
//! - Latency: at each `--rate`, after the relay has been idle
//!   `--idle-secs`, plain-SQL producers on their own connections commit one
//!   event each on an open-loop schedule; commit to consumer receive, and
//!   the relay's CPU (its process and its database sessions) per event.

mod broker;
mod check;
mod consumer;
mod cpu;
mod kafka;
mod reference;
mod shape;
mod webhook;

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Result};
use clap::Args;
use outbox::{Schema, WakeupTrigger};
use serde_json::{json, Value};
use sqlx::PgPool;
use uuid::Uuid;

use self::broker::{Broker, Side, AGGREGATE_TYPE, EVENT_TYPE};
use self::check::Arrivals;
use self::consumer::Consumer;
use self::cpu::{bench_cpu_seconds, bench_report};
use super::child_relay::ChildRelay as Relay;
use super::latency::open_loop;
use super::relay_cpu::{cpu_report, Cpu};

/// The relay's `--instance-id`.
const RELAY_INSTANCE: &str = "bench-e2e-relay";
use super::stats::{ms, quantile};
use super::{drop_slot, fresh_schema, fresh_wal_schema, warm_up, Server};
use crate::ctx::Ctx;

/// How long the consumer may go without a new event before the run fails.
const STALL: Duration = Duration::from_secs(60);

#[derive(Debug, Args)]
pub struct E2eArgs {
    /// The broker: `redis`, `amqp`, `nats`, `kafka` or `http` starts a
    /// throwaway one (`kafka`: tansu, from `OUTBOX_TANSU_BIN` or `PATH`;
    /// `http`: a webhook receiver in this process); a `redis://`,
    /// `amqp://`, `nats://` or `kafka://` URL uses a running one.
    #[arg(long, value_name = "SPEC")]
    pub publisher: String,
    /// Events of the drain run.
    #[arg(long, default_value_t = 200_000, value_parser = clap::value_parser!(u64).range(1..=100_000_000))]
    pub events: u64,
    /// Aggregates of the drain run (event i belongs to aggregate i % this).
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u32).range(1..=10_000_000))]
    pub aggregates: u32,
    /// Producer rates of the latency runs, events per second.
    #[arg(long, value_delimiter = ',', default_values_t = [500, 5000])]
    pub rate: Vec<u32>,
    /// Seconds of each latency run.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=3_600))]
    pub seconds: u64,
    /// Seconds the relay is idle before each latency run.
    #[arg(long, default_value_t = 2)]
    pub idle_secs: u64,
    /// Producer connections of the latency runs (enough that the schedule
    /// is kept).
    #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u32).range(1..=256))]
    pub connections: u32,
    /// `wal`: the schema in the WAL mode; producers call `outbox_emit(...)`
    /// and the relay reads the slot (its CPU includes its walsender). Left
    /// out: the table mode.
    #[arg(long, value_name = "MODE")]
    pub mode: Option<outbox::DeliveryMode>,
    /// `http` only: every N-th request the receiver gets is answered after
    /// `--webhook-slow-ms`, as a real endpoint's slow tail is (0: none).
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub webhook_slow_every: u64,
    /// `http` only: how long a slow request takes, in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 50, value_parser = clap::value_parser!(u64).range(1..=10_000))]
    pub webhook_slow_ms: u64,
}

impl E2eArgs {
    fn wal(&self) -> bool {
        self.mode == Some(outbox::DeliveryMode::Wal)
    }
}

/// Waits until `arrivals` has all `events`, failing loudly if the consumer
/// or the relay stops or nothing new arrives for [`STALL`]; the seconds
/// since `start`.
async fn wait_all(
    arrivals: &Arrivals,
    events: u64,
    consumer: &mut Consumer,
    mut relay: Option<&mut Relay>,
    start: Instant,
) -> Result<f64> {
    let (mut last, mut progress) = (0, Instant::now());
    loop {
        let now = arrivals.distinct();
        if now >= events {
            return Ok(start.elapsed().as_secs_f64());
        }
        if now > last {
            (last, progress) = (now, Instant::now());
        } else if progress.elapsed() > STALL {
            bail!(
                "the consumer has {now} of {events} events and nothing new for {} s",
                STALL.as_secs()
            );
        }
        consumer.check().await?;
        if let Some(relay) = relay.as_deref_mut() {
            relay.check_running()?;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// Fails the run if `arrivals` is not every event, each aggregate's in
/// order; the duplicates otherwise.
fn verdict(what: &str, arrivals: &Arrivals) -> Result<(check::Tally, Vec<Option<Instant>>)> {
    let (tally, times) = arrivals.snapshot();
    ensure!(
        tally.clean(),
        "{what}: LOSS OR REORDERING: {}",
        tally.faults()
    );
    Ok((tally, times))
}

/// Seconds from `start` to the first arrival: what starting took (the
/// relay's process, connections and partitions; the client's connection).
fn first_arrival(times: &[Option<Instant>], start: Instant) -> f64 {
    times
        .iter()
        .flatten()
        .min()
        .map_or(0.0, |t| t.saturating_duration_since(start).as_secs_f64())
}

/// The events of a preload (`$1` aggregate type, `$2` event type, `$4`
/// aggregates, `$5` body length, `i` the event's number), as select-list
/// items.
const PRELOAD_COLUMNS: &str = "$1, (i % $4)::text, $2,
    jsonb_build_object('a', i % $4, 'i', i, 'n', i / $4, 'pad', repeat('x', $5 - length(
        format('{\"a\": %s, \"i\": %s, \"n\": %s, \"pad\": \"', i % $4, i, i / $4))))";

/// Events of one preload transaction in the WAL mode: a producer's
/// transaction commits a few events, not tens of thousands (the table
/// mode's preload is not read until it is all there, so its size does not
/// matter there).
const WAL_PRELOAD_PER_TX: u64 = 100;

/// Writes events `0..events` of a run over `aggregates` aggregates into
/// `schema` by plain SQL, in order: rows in the table mode, `outbox_emit`
/// in the WAL mode.
async fn preload(
    pool: &PgPool,
    schema: &Schema,
    events: u64,
    aggregates: u32,
    wal: bool,
) -> Result<()> {
    let s = schema.name();
    let (sql, chunk) = if wal {
        (
            format!(
                "SELECT count({s}.outbox_emit({PRELOAD_COLUMNS}))
                 FROM generate_series($3::bigint, $6::bigint) AS i"
            ),
            WAL_PRELOAD_PER_TX,
        )
    } else {
        (
            format!(
                "INSERT INTO {s}.outbox_events (aggregate_type, aggregate_id, event_type, payload)
                 SELECT {PRELOAD_COLUMNS}
                 FROM generate_series($3::bigint, $6::bigint) AS i ORDER BY i"
            ),
            50_000,
        )
    };
    for start in (0..events).step_by(chunk as usize) {
        sqlx::query(&sql)
            .bind(AGGREGATE_TYPE)
            .bind(EVENT_TYPE)
            .bind(start as i64)
            .bind(i64::from(aggregates))
            .bind(198i32)
            .bind(((start + chunk).min(events) - 1) as i64)
            .execute(pool)
            .await?;
    }
    Ok(())
}

pub async fn run(ctx: &Ctx, fsync: bool, args: E2eArgs) -> Result<Value> {
    let slow = webhook::Slow {
        every: args.webhook_slow_every,
        wait: Duration::from_millis(args.webhook_slow_ms),
    };
    let broker = Broker::start(&args.publisher, slow).await?;
    broker.prepare().await?;
    let server = Server::start(ctx, fsync).await?;
    let pool = server.pool(4).await?;
    let schema = if args.wal() {
        fresh_wal_schema(&pool, "bench_e2e", WakeupTrigger::Idle).await?
    } else {
        fresh_schema(&pool, "bench_e2e", WakeupTrigger::Idle).await?
    };
    announce(&args, &broker);
    preload(&pool, &schema, args.events, args.aggregates, args.wal()).await?;

    let (mut relay, mut cpu, relayed) =
        drain_through_relay(&args, &broker, &server, &pool, &schema).await?;
    let reference = drain_through_client(&args, &broker, relayed.bench_cpu_secs).await?;
    print_drain(args.events, &relayed, &reference);

    let producers = server
        .producer_pool(args.connections, Duration::from_secs(args.seconds) + STALL)
        .await?;
    // The latency runs, one per `--rate`, each after the relay has been
    // idle `--idle-secs`.
    warm_up(&producers, args.connections).await?;
    let mut rates = Vec::new();
    for &rate in &args.rate {
        tokio::time::sleep(Duration::from_secs(args.idle_secs)).await;
        relay.check_running()?;
        rates.push(
            at_rate(
                &args, rate, &broker, &producers, &pool, &schema, &mut relay, &mut cpu,
            )
            .await?,
        );
    }
    let stopped = relay.stop().await?;
    ensure!(
        stopped.success(),
        "the child `outbox relay` ended with {stopped}"
    );
    producers.close().await;
    if args.wal() {
        drop_slot(&pool, &schema).await?;
    }
    Ok(summary(&args, fsync, &broker, &relayed, &reference, rates))
}

/// The run's first line: the broker, the mode, the drain and the rates.
fn announce(args: &E2eArgs, broker: &Broker) {
    println!(
        "e2e: {} ({}), {} mode, {} events over {} aggregates, then {:?} events/s for {} s each",
        broker.name(),
        if broker.started {
            "started by the bench"
        } else {
            "running"
        },
        args.mode.unwrap_or_default().name(),
        args.events,
        args.aggregates,
        args.rate,
        args.seconds
    );
}

/// The drain through the relay.
struct RelayDrain {
    /// From the relay's start until the consumer had every event.
    secs: f64,
    /// From the relay's start to the first arrival.
    first: f64,
    /// The relay's CPU per event ([`cpu_report`]).
    cpu: Value,
    /// The bench's own CPU seconds meanwhile: its consumer's alone.
    bench_cpu_secs: f64,
    tally: check::Tally,
}

/// The drain through the relay, started with the backlog waiting, until
/// the consumer has every event, none missing or out of order. The relay
/// keeps running, and its CPU reading with it, for the latency runs.
async fn drain_through_relay(
    args: &E2eArgs,
    broker: &Broker,
    server: &Server,
    pool: &PgPool,
    schema: &Schema,
) -> Result<(Relay, Cpu, RelayDrain)> {
    let (n, aggs) = (args.events, args.aggregates);
    let arrivals = Arrivals::new(n, aggs);
    let mut consumer = Consumer::start(broker, Side::Relay, arrivals.clone()).await?;
    let (spec, env) = broker.relay_spec();
    let start = Instant::now();
    let bench_at_start = bench_cpu_seconds();
    let mut relay = Relay::spawn_publishing(&server.url, schema, RELAY_INSTANCE, &spec, &env)?;
    let mut cpu = Cpu::default();
    let cpu_before = cpu.now(pool, &relay).await?;
    let secs = wait_all(&arrivals, n, &mut consumer, Some(&mut relay), start).await?;
    let relay_cpu = cpu_report(cpu_before, cpu.now(pool, &relay).await?, n, secs);
    let bench_cpu_secs = bench_cpu_seconds() - bench_at_start;
    drop(consumer);
    let (tally, times) = verdict("drain through the relay", &arrivals)?;
    let drained = RelayDrain {
        secs,
        first: first_arrival(&times, start),
        cpu: relay_cpu,
        bench_cpu_secs,
        tally,
    };
    Ok((relay, cpu, drained))
}

/// The reference drain: the same messages published by the broker's own
/// client.
struct ReferenceDrain {
    /// From the first publish until the consumer had every event.
    secs: f64,
    /// From the first publish to the first arrival.
    first: f64,
    /// The bench's CPU per event while the relay drained and while the
    /// client published ([`bench_report`]).
    bench_cpu: Value,
    tally: check::Tally,
}

/// The reference drain, read back by the same consumer and checked the
/// same way; `bench_while_relay`: the bench's CPU seconds during the
/// relay's drain, what its consumer alone costs.
async fn drain_through_client(
    args: &E2eArgs,
    broker: &Broker,
    bench_while_relay: f64,
) -> Result<ReferenceDrain> {
    let (n, aggs) = (args.events, args.aggregates);
    let arrivals = Arrivals::new(n, aggs);
    let mut consumer = Consumer::start(broker, Side::Reference, arrivals.clone()).await?;
    let start = Instant::now();
    let bench_at_reference = bench_cpu_seconds();
    let (published, waited) = tokio::join!(
        reference::publish(broker, n, aggs),
        wait_all(&arrivals, n, &mut consumer, None, start)
    );
    published?;
    let secs = waited?;
    let bench_cpu = bench_report(
        bench_while_relay,
        bench_cpu_seconds() - bench_at_reference,
        n,
    );
    drop(consumer);
    let (tally, times) = verdict("drain through the broker's own client", &arrivals)?;
    Ok(ReferenceDrain {
        secs,
        first: first_arrival(&times, start),
        bench_cpu,
        tally,
    })
}

/// The report's drain part: both rates and their ratio, the first
/// arrivals, and the CPU per event of the relay and of the broker's
/// client.
fn print_drain(n: u64, relayed: &RelayDrain, reference: &ReferenceDrain) {
    let (relay_secs, reference_secs) = (relayed.secs, reference.secs);
    let (relay_rate, reference_rate) = (n as f64 / relay_secs, n as f64 / reference_secs);
    let (relay_dups, relay_first, reference_first) =
        (relayed.tally.duplicates, relayed.first, reference.first);
    let (drain_cpu, bench_cpu) = (&relayed.cpu, &reference.bench_cpu);
    println!(
        "  drain: relay {relay_rate:>9.0} events/s ({relay_secs:.2} s, {relay_dups} duplicates), \
         broker's own client {reference_rate:>9.0} events/s ({reference_secs:.2} s): {:.2}x",
        relay_rate / reference_rate
    );
    println!(
        "         first arrival after {relay_first:.2} s (relay) and {reference_first:.2} s (client)"
    );
    println!(
        "         relay cpu {:.1} us/event (process {:.1}, database sessions {:.1}); \
         broker's own client {:.1} us/event (the bench's cpu beyond its consumer's {:.1})",
        drain_cpu["relay_us_per_event"].as_f64().unwrap_or(f64::NAN),
        drain_cpu["relay_process_us_per_event"]
            .as_f64()
            .unwrap_or(f64::NAN),
        drain_cpu["relay_sessions_us_per_event"]
            .as_f64()
            .unwrap_or(f64::NAN),
        bench_cpu["reference_client_us_per_event"]
            .as_f64()
            .unwrap_or(f64::NAN),
        bench_cpu["while_relay_us_per_event"]
            .as_f64()
            .unwrap_or(f64::NAN),
    );
}

/// The run's JSON summary (`bench --json`).
fn summary(
    args: &E2eArgs,
    fsync: bool,
    broker: &Broker,
    relayed: &RelayDrain,
    reference: &ReferenceDrain,
    rates: Vec<Value>,
) -> Value {
    let n = args.events;
    let (relay_rate, reference_rate) = (n as f64 / relayed.secs, n as f64 / reference.secs);
    json!({
        "scenario": "e2e",
        "mode": args.mode.unwrap_or_default().name(),
        "broker": broker.name(),
        "broker_started": broker.started,
        "events": n,
        "aggregates": args.aggregates,
        "drain": {
            "relay_events_per_s": relay_rate,
            "reference_events_per_s": reference_rate,
            "ratio": relay_rate / reference_rate,
            "relay_secs": relayed.secs,
            "reference_secs": reference.secs,
            "relay_first_arrival_secs": relayed.first,
            "reference_first_arrival_secs": reference.first,
            "reference_in_flight": if broker.kind == broker::Kind::Http { reference::HTTP_IN_FLIGHT as u64 } else { reference::WINDOW },
            "delivered": relayed.tally.distinct,
            "out_of_order": relayed.tally.out_of_order,
            "duplicates": relayed.tally.duplicates,
            "reference_delivered": reference.tally.distinct,
            "cpu": relayed.cpu,
            "bench_cpu": reference.bench_cpu,
        },
        "latency": rates,
        "fsync": fsync,
    })
}

/// One latency run at `rate` events/s.
#[allow(clippy::too_many_arguments)]
async fn at_rate(
    args: &E2eArgs,
    rate: u32,
    broker: &Broker,
    producers: &PgPool,
    pool: &PgPool,
    schema: &Schema,
    relay: &mut Relay,
    cpu: &mut Cpu,
) -> Result<Value> {
    let total = u64::from(rate) * args.seconds;
    // One event per aggregate per second: producers never race on one
    // aggregate, so the order they commit in is the order written.
    let aggs = rate.max(1);
    let arrivals = Arrivals::new(total, aggs);
    let mut consumer = Consumer::start(broker, Side::Relay, arrivals.clone()).await?;
    let s = schema.name();
    let insert: Arc<str> = if args.wal() {
        format!("SELECT {s}.outbox_emit($1, $2, $3, $4::jsonb)")
    } else {
        format!(
            "INSERT INTO {s}.outbox_events (aggregate_type, aggregate_id, event_type, payload)
             VALUES ($1, $2, $3, $4::jsonb) RETURNING id"
        )
    }
    .into();
    let start = Instant::now();
    let cpu_before = cpu.now(pool, relay).await?;
    let (schedule, waited) = tokio::join!(
        open_loop(rate, total, |i| {
            let (producers, insert) = (producers.clone(), insert.clone());
            async move {
                let i = i as u64;
                let began = Instant::now();
                let id: Uuid = sqlx::query_scalar(&insert)
                    .bind(AGGREGATE_TYPE)
                    .bind((i % u64::from(aggs)).to_string())
                    .bind(EVENT_TYPE)
                    .bind(check::body(i, aggs))
                    .fetch_one(&producers)
                    .await?;
                Ok((id, Instant::now(), began))
            }
        }),
        wait_all(&arrivals, total, &mut consumer, None, start)
    );
    let (committed, late, _, schedule_secs) = schedule?;
    let achieved = total as f64 / schedule_secs.max(1e-9);
    let secs = waited?;
    let cpu = cpu_report(cpu_before, cpu.now(pool, relay).await?, total, secs);
    drop(consumer);
    let (tally, times) = verdict(&format!("latency at {rate}/s"), &arrivals)?;
    let mut latencies: Vec<Duration> = committed
        .iter()
        .zip(&times)
        .map(|((_, at), got)| got.map_or(Duration::ZERO, |got| got.saturating_duration_since(*at)))
        .collect();
    latencies.sort();
    let q = |x| ms(quantile(&latencies, x));
    println!(
        "  {rate:>6}/s: commit -> consumer p50 {:.1} ms, p99 {:.1} ms, p99.9 {:.1} ms, max {:.1} ms; \
         relay cpu {:.1} us/event ({:.1} % of a core); {late} late starts \
         ({achieved:.0}/s achieved), {} duplicates{}",
        q(0.5),
        q(0.99),
        q(0.999),
        q(1.0),
        cpu["relay_us_per_event"].as_f64().unwrap_or(0.0),
        cpu["relay_core_share"].as_f64().unwrap_or(0.0) * 100.0,
        tally.duplicates,
        read_again_note(arrivals.reads_again()),
    );
    Ok(json!({
        "rate": rate,
        "events": total,
        "p50_ms": q(0.5),
        "p99_ms": q(0.99),
        "p999_ms": q(0.999),
        "max_ms": q(1.0),
        "late_starts": late,
        "achieved_rate": achieved,
        "read_again": arrivals.reads_again(),
        "delivered": tally.distinct,
        "out_of_order": tally.out_of_order,
        "duplicates": tally.duplicates,
        "cpu": cpu,
    }))
}

/// What the consumer was handed again at a position it had read (the
/// broker's doing, not counted as duplicates), when anything was.
fn read_again_note(n: u64) -> String {
    if n == 0 {
        String::new()
    } else {
        format!(
            " ({n} messages handed to the consumer again at an offset it had read, not counted)"
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_missing_an_event_or_out_of_order_fails_loudly() {
        let lost = Arrivals::new(3, 1);
        for i in [0, 1] {
            lost.record(check::body(i, 1).as_bytes());
        }
        let err = verdict("drain", &lost).unwrap_err().to_string();
        assert!(
            err.contains("LOSS OR REORDERING") && err.contains("2 of 3"),
            "{err}"
        );

        let reordered = Arrivals::new(3, 1);
        for i in [0, 2, 1] {
            reordered.record(check::body(i, 1).as_bytes());
        }
        let err = verdict("drain", &reordered).unwrap_err().to_string();
        assert!(err.contains("1 out of their aggregate's order"), "{err}");

        let clean = Arrivals::new(3, 1);
        for i in [0, 1, 1, 2] {
            clean.record(check::body(i, 1).as_bytes());
        }
        let (tally, times) = verdict("drain", &clean).unwrap();
        assert_eq!((tally.distinct, tally.duplicates), (3, 1));
        assert!(times.iter().all(Option::is_some));
    }
}
