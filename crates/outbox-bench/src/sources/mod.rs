//! `bench sources`: one `outbox relay` serving many sources (issue 29),
//! as a child process on a throwaway server, publishing to stdout.
//!
//! - Idle: `--schemas` tenant schemas found by a pattern, all dormant: the
//!   relay's sessions against `[sources] pool_size` + 1, its CPU (process
//!   and sessions) as a share of a core over `--idle-secs`, and the
//!   commit-to-delivery time of `--wakeups` plain-SQL inserts, each into
//!   another dormant tenant; the same of `outbox relay --schema` over one
//!   idle schema, the reference.
//! - Drain: `--schemas` × `--events-per-schema` events against as many in
//!   one schema, same relay settings; the ratio of the rates.
//! - Fairness: a steady `--rate` into one source for `--seconds`, without
//!   and then with a `--backlog` in another; the ratio of its p99s.

mod child;
mod drain;
mod fairness;
mod idle;

use anyhow::Result;
use clap::Args;
use outbox::{Schema, WakeupTrigger};
use serde_json::json;
use sqlx::PgPool;

use super::{fresh_schema, Server};
use crate::ctx::Ctx;

#[derive(Debug, Args)]
pub struct SourcesArgs {
    /// Tenant schemas on the one database, 1 to 1000.
    #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u32).range(1..=1_000))]
    pub schemas: u32,
    /// The relay's `[sources] pool_size` (connections per database, its
    /// wake-up listener included), 2 to 1000.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(2..=1_000))]
    pub pool_size: u32,
    /// Seconds the relay's CPU is read with every schema dormant, 1 to 3600.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=3_600))]
    pub idle_secs: u64,
    /// Plain-SQL inserts timed from commit to delivery, each into another
    /// dormant tenant, 1 to 10000.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub wakeups: u32,
    /// Milliseconds between two wake-ups, 0 to 60000.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u64).range(0..=60_000))]
    pub wakeup_gap_ms: u64,
    /// Drain: events preloaded into each tenant (and --schemas times as
    /// many into one schema), 1 to 100000.
    #[arg(long, default_value_t = 1_000, value_parser = clap::value_parser!(u64).range(1..=100_000))]
    pub events_per_schema: u64,
    /// Drain: distinct aggregates per tenant, 1 to 100000.
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u64).range(1..=100_000))]
    pub aggregates_per_schema: u64,
    /// Fairness: the backlog of the busy source, 1 to 10000000.
    #[arg(long, default_value_t = 200_000, value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
    pub backlog: u64,
    /// Fairness: inserts per second into the steady source, 1 to 5000.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=5_000))]
    pub rate: u32,
    /// Fairness: seconds of the steady schedule, 1 to 3600.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=3_600))]
    pub seconds: u64,
}

/// The tenants' names and the pattern that finds them.
const TENANT_PREFIX: &str = "bench_tenant_";
const ONE: &str = "bench_one";
const STEADY: &str = "bench_steady";

/// Migrates `names` afresh (dropped first), a few at a time, with the
/// default wake-up trigger, as `outbox migrate` does.
async fn fresh_schemas(pool: &PgPool, names: &[String]) -> Result<()> {
    for chunk in names.chunks(4) {
        let all = chunk
            .iter()
            .map(|n| fresh_schema(pool, n, WakeupTrigger::default()));
        for r in futures::future::join_all(all).await {
            r?;
        }
    }
    Ok(())
}

async fn drop_schemas(pool: &PgPool, names: &[String]) -> Result<()> {
    for name in names {
        sqlx::raw_sql(&format!("DROP SCHEMA IF EXISTS {name} CASCADE"))
            .execute(pool)
            .await?;
    }
    Ok(())
}

/// What `bench sources` measured.
struct Measured {
    /// How many tenant schemas the relay of many sources served.
    tenants: usize,
    /// The relay over every tenant schema, idle and waking one.
    idle: idle::Idle,
    /// `outbox relay --schema` over one idle schema.
    reference: idle::Idle,
    drain: drain::Drain,
    fair: fairness::Fairness,
}

pub async fn run(ctx: &Ctx, fsync: bool, args: SourcesArgs) -> Result<serde_json::Value> {
    let server = Server::start(ctx, fsync).await?;
    let pool = server.pool(8).await?;
    let tenants: Vec<String> = (1..=args.schemas)
        .map(|i| format!("{TENANT_PREFIX}{i:04}"))
        .collect();
    let pattern = format!("{TENANT_PREFIX}*");
    eprintln!("bench sources: migrating {} tenant schemas", tenants.len());
    let mut all = tenants.clone();
    all.extend([ONE.to_owned(), STEADY.to_owned()]);
    fresh_schemas(&pool, &all).await?;
    let (one, steady) = (Schema::new(ONE)?, Schema::new(STEADY)?);
    let configs = child::Configs::new()?;

    let idle = idle::many(&server.url, &pool, &configs, &tenants, &pattern, &args).await?;
    let reference = idle::one(&server.url, &pool, &one, &args).await?;
    let drain = drain::run(
        &server.url,
        &pool,
        &configs,
        &tenants,
        &pattern,
        &one,
        &args,
    )
    .await?;
    let fair = fairness::run(&server.url, &pool, &configs, &one, &steady, &args).await?;
    drop_schemas(&pool, &all).await?;

    let measured = Measured {
        tenants: tenants.len(),
        idle,
        reference,
        drain,
        fair,
    };
    print_idle(&args, &measured);
    print_drain(&args, &measured);
    print_fairness(&args, &measured.fair);
    Ok(summary(&args, &measured))
}

/// The relay connections the idle figures are held against:
/// `[sources] pool_size` + 1.
fn connection_limit(args: &SourcesArgs) -> i64 {
    i64::from(args.pool_size) + 1
}

/// The report's idle part: the relay over every tenant schema, then over
/// one, and how they compare.
fn print_idle(args: &SourcesArgs, m: &Measured) {
    let (idle, reference) = (&m.idle, &m.reference);
    let limit = connection_limit(args);
    println!(
        "sources: one relay, {} tenant schemas on one database, [sources] pool_size {}",
        m.tenants, args.pool_size
    );
    println!(
        "  idle: {} relay connections (limit pool_size + 1 = {limit}); relay cpu {:.2} % of a core ({:.2} process + {:.2} its sessions) over {} s (all dormant {:.1} s after start)",
        idle.connections,
        idle.core_share * 100.0,
        idle.process_share * 100.0,
        idle.sessions_share * 100.0,
        args.idle_secs,
        idle.settle_secs
    );
    println!(
        "  wake-up of a dormant tenant, plain-SQL insert -> line read from the relay's stdout ({} inserts {} ms apart): p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
        idle.wakeups.len(),
        args.wakeup_gap_ms,
        idle.p(0.5),
        idle.p(0.99),
        idle.p(1.0)
    );
    println!(
        "  reference, `outbox relay --schema` over one idle schema: {} connections; cpu {:.2} % of a core ({:.2} process + {:.2} its sessions); wake-up p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
        reference.connections,
        reference.core_share * 100.0,
        reference.process_share * 100.0,
        reference.sessions_share * 100.0,
        reference.p(0.5),
        reference.p(0.99),
        reference.p(1.0)
    );
    println!(
        "  many / one: idle cpu {:.2}, wake-up p50 {:.2}, p99 {:.2}",
        idle.core_share / reference.core_share,
        idle.p(0.5) / reference.p(0.5),
        idle.p(0.99) / reference.p(0.99)
    );
}

/// The report's drain part: the backlog over every tenant schema against
/// the same backlog in one.
fn print_drain(args: &SourcesArgs, m: &Measured) {
    let drain = &m.drain;
    println!(
        "  drain of {} events: {} schemas x {} {:.0} events/s ({:.2} s, relay {:.1} µs/event), one schema {:.0} events/s ({:.2} s, relay {:.1} µs/event); ratio many / one {:.2}",
        drain.events,
        m.tenants,
        args.events_per_schema,
        drain.many.events_per_sec,
        drain.many.secs,
        drain.many.relay_us_per_event,
        drain.one.events_per_sec,
        drain.one.secs,
        drain.one.relay_us_per_event,
        drain.ratio()
    );
}

/// The report's fairness part: one source's latency alone and beside
/// another's backlog.
fn print_fairness(args: &SourcesArgs, fair: &fairness::Fairness) {
    let (a, b) = (&fair.alone, &fair.with_backlog);
    let lasted = if b.backlog_left > 0 {
        format!("{} of it left at the schedule's end", b.backlog_left)
    } else {
        format!(
            "drained {:.1} s into the schedule",
            b.backlog_lasted_secs.unwrap_or(f64::NAN)
        )
    };
    println!(
        "  fairness, {} /s into one source for {} s: p99 {:.2} ms alone (p50 {:.2}, {} events); beside a backlog of {} ({lasted}): p99 {:.2} ms (p50 {:.2}, the {} events committed while it lasted); ratio {:.2}",
        args.rate,
        args.seconds,
        a.p99_ms,
        a.p50_ms,
        a.samples,
        args.backlog,
        b.p99_ms,
        b.p50_ms,
        b.samples,
        fair.ratio()
    );
    if b.samples < 100 {
        println!("  fewer than 100 events were committed while the backlog lasted: raise --backlog or --rate for a steadier p99");
    }
}

/// The run's JSON summary (`bench --json`).
fn summary(args: &SourcesArgs, m: &Measured) -> serde_json::Value {
    let (idle, reference, drain, fair) = (&m.idle, &m.reference, &m.drain, &m.fair);
    let (a, b) = (&fair.alone, &fair.with_backlog);
    let mut report = json!({
        "scenario": "sources",
        "schemas": m.tenants,
        "pool_size": args.pool_size,
        "relay_connections": idle.connections,
        "connection_limit": connection_limit(args),
        "idle_secs": args.idle_secs,
        "idle_core_share": idle.core_share,
        "idle_process_core_share": idle.process_share,
        "idle_sessions_core_share": idle.sessions_share,
        "settle_secs": idle.settle_secs,
        "wakeups": idle.wakeups.len(),
        "wakeup_p50_ms": idle.p(0.5),
        "wakeup_p99_ms": idle.p(0.99),
        "wakeup_max_ms": idle.p(1.0),
        "one_schema_connections": reference.connections,
        "one_schema_idle_core_share": reference.core_share,
        "one_schema_wakeup_p50_ms": reference.p(0.5),
        "one_schema_wakeup_p99_ms": reference.p(0.99),
        "idle_core_share_ratio": idle.core_share / reference.core_share,
        "wakeup_p99_ratio": idle.p(0.99) / reference.p(0.99),
        "drain_events": drain.events,
        "drain_many_events_per_sec": drain.many.events_per_sec,
        "drain_one_events_per_sec": drain.one.events_per_sec,
        "drain_many_from_start_secs": drain.many.from_start_secs,
        "drain_one_from_start_secs": drain.one.from_start_secs,
        "drain_ratio": drain.ratio(),
        "fairness_rate": args.rate,
        "fairness_backlog": args.backlog,
        "fairness_p99_alone_ms": a.p99_ms,
        "fairness_p99_with_backlog_ms": b.p99_ms,
        "fairness_p50_alone_ms": a.p50_ms,
        "fairness_p50_with_backlog_ms": b.p50_ms,
        "fairness_max_with_backlog_ms": b.max_ms,
        "fairness_achieved_rate_alone": a.achieved,
        "fairness_achieved_rate_with_backlog": b.achieved,
        "fairness_backlog_left": b.backlog_left,
        "fairness_samples_alone": a.samples,
        "fairness_samples_with_backlog": b.samples,
        "fairness_backlog_lasted_secs": b.backlog_lasted_secs,
        "fairness_ratio": fair.ratio(),
    });
    // Beside the rates, the relay's CPU per event (apart: one `json!` of
    // every figure passes the macro's recursion limit).
    report["drain_many_relay_us_per_event"] = json!(drain.many.relay_us_per_event);
    report["drain_one_relay_us_per_event"] = json!(drain.one.relay_us_per_event);
    report
}
