//! `outbox bench console`: what the console's pages cost on a large outbox,
//! and what an open console costs the relay.
//!
//! 1. Fills a fresh schema in one `INSERT … SELECT generate_series`:
//!    `--processed` delivered rows kept (retention mode), `--dead` dead
//!    letters spread evenly among them, then `--pending` pending rows (1 %
//!    of them retrying, due in 5 minutes); then `VACUUM ANALYZE`.
//! 2. Serves the console of that schema in this process on loopback and
//!    requests each page `--requests` times, one at a time. Server time is
//!    the handler's own (its `Server-Timing` header: from the request head
//!    read to the answer built, database included); the client's time to
//!    the last byte on loopback is reported beside it.
//! 3. The relay's black-box latency (`bench latency --producer sql`: plain
//!    SQL producers at `--rate`, `outbox relay` as a child process) on the
//!    same server, `--pairs` runs without and as many with `--viewers`
//!    consoles refreshing the filled outbox's overview at the page's own
//!    interval (3 s), in the order without, with, with, without, …

mod pages;
mod relay;

use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use clap::Args;
use serde_json::json;

use super::{fresh_schema, Server};
use crate::ctx::Ctx;
use pages::{pages, time_page};
use relay::relay_with_and_without;

#[derive(Debug, Args)]
pub struct ConsoleArgs {
    /// Delivered rows kept (retention mode).
    #[arg(long, default_value_t = 1_000_000)]
    pub processed: u64,
    /// Pending rows (1 % of them retrying).
    #[arg(long, default_value_t = 100_000)]
    pub pending: u64,
    /// Dead letters, spread among the delivered rows.
    #[arg(long, default_value_t = 100_000)]
    pub dead: u64,
    /// Requests per page, one at a time, 1 to 10000.
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub requests: u32,
    /// The relay's rate for the latency comparison, events/s; 0 skips it.
    #[arg(long, default_value_t = 500, value_parser = clap::value_parser!(u32).range(0..=20_000))]
    pub rate: u32,
    /// Length of each latency run, seconds, 1 to 3600.
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u64).range(1..=3_600))]
    pub seconds: u64,
    /// Latency runs of each kind (without, with a console), 1 to 10.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=10))]
    pub pairs: u32,
    /// Consoles refreshing the overview during the latency runs with a
    /// console open, 1 to 100.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=100))]
    pub viewers: u32,
}

/// The fill: `$1` delivered and `$2` dead-lettered rows interleaved (row i
/// of the first `$1 + $2` is a dead letter when `i·$2 / ($1+$2)` steps up),
/// then `$3` pending rows, every 100th of them retrying. Ten milliseconds
/// of `created_at` apart, the newest now; aggregates `agg-0`…`agg-49999`
/// of three types, so an aggregate's history is spread over the table.
const FILL: &str = "
INSERT INTO {schema}.outbox_events (aggregate_type, aggregate_id, event_type, payload, headers,
    attempts, created_at, processed_at, next_attempt_at, last_error, dead_lettered_at)
SELECT (ARRAY['order', 'payment', 'shipment'])[1 + i % 3],
       'agg-' || (i % 50000),
       (ARRAY['order.created', 'order.paid', 'payment.captured', 'shipment.sent'])[1 + i % 4],
       jsonb_build_object('id', i, 'customer', i % 977, 'total_cents', (i * 7919) % 100000,
                          'note', 'an event of the console benchmark'),
       jsonb_build_object('traceparent',
                          '00-' || md5(i::text) || '-' || left(md5((i + 1)::text), 16) || '-01'),
       CASE s WHEN 'dead' THEN 10 WHEN 'retrying' THEN 3 ELSE 0 END,
       t,
       CASE WHEN s = 'processed' THEN t + interval '50 ms' END,
       CASE WHEN s = 'retrying' THEN now() + interval '5 minutes' END,
       CASE WHEN s IN ('dead', 'retrying')
            THEN 'broker rejected the message: 422 unprocessable (' || i || ')' END,
       CASE WHEN s = 'dead' THEN t + interval '10 minutes' END
FROM (SELECT i, now() - ($1 + $2 + $3 - i) * interval '10 ms' AS t,
             CASE WHEN i > $1 + $2 THEN CASE WHEN i % 100 = 0 THEN 'retrying' ELSE 'pending' END
                  WHEN (i * $2) / ($1 + $2) > ((i - 1) * $2) / ($1 + $2) THEN 'dead'
                  ELSE 'processed' END AS s
      FROM generate_series(1::bigint, $1 + $2 + $3) i) g
ORDER BY i";

pub async fn run(ctx: &Ctx, fsync: bool, args: ConsoleArgs) -> Result<serde_json::Value> {
    let server = Server::start(ctx, fsync).await?;
    let pool = server.pool(8).await?;
    let schema = fresh_schema(&pool, "bench_console", outbox::WakeupTrigger::default()).await?;
    let rows = args.processed + args.dead + args.pending;
    eprintln!(
        "bench console: filling {rows} rows ({} delivered, {} dead letters, {} pending)",
        args.processed, args.dead, args.pending
    );
    let started = Instant::now();
    let as_i64 = |n: u64| i64::try_from(n).context("too many rows");
    sqlx::query(&FILL.replace("{schema}", schema.name()))
        .bind(as_i64(args.processed)?)
        .bind(as_i64(args.dead)?)
        .bind(as_i64(args.pending)?)
        .execute(&pool)
        .await
        .context("filling the outbox")?;
    sqlx::raw_sql(&format!("VACUUM ANALYZE {}.outbox_events", schema.name()))
        .execute(&pool)
        .await?;
    eprintln!(
        "bench console: filled in {:.1} s",
        started.elapsed().as_secs_f64()
    );

    let addr = (ctx.serve_console)(pool.clone(), schema.clone()).await?;
    let base = format!("http://{addr}");
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()?;
    let pages = pages(&pool, &schema).await?;
    let mut report = Vec::new();
    println!(
        "console: {rows} rows ({} delivered kept, {} dead letters, {} pending); {} requests per page",
        args.processed, args.dead, args.pending, args.requests
    );
    println!("  server time = the handler's Server-Timing; client = loopback, to the last byte");
    for page in &pages {
        report.push(time_page(&client, &base, page, args.requests).await?);
    }
    let slowest = report
        .iter()
        .filter_map(|p| p["server_p99_ms"].as_f64())
        .fold(0.0, f64::max);
    println!("  slowest page's server p99: {slowest:.1} ms");

    // What an index of the aggregates' own would change for their history
    // (not in the default schema: every producer's INSERT would pay for it).
    println!(
        "  with CREATE INDEX … (aggregate_type, aggregate_id, seq), not in the default schema:"
    );
    sqlx::raw_sql(&format!(
        "CREATE INDEX bench_console_aggregate ON {s}.outbox_events (aggregate_type, aggregate_id, seq);
         ANALYZE {s}.outbox_events",
        s = schema.name()
    ))
    .execute(&pool)
    .await?;
    let aggregate = pages
        .iter()
        .find(|p| p.name == "events: an aggregate")
        .context("the aggregate's page")?;
    let with_index = time_page(&client, &base, aggregate, args.requests).await?;
    sqlx::raw_sql(&format!(
        "DROP INDEX {}.bench_console_aggregate",
        schema.name()
    ))
    .execute(&pool)
    .await?;

    let relay = if args.rate > 0 {
        Some(relay_with_and_without(ctx, fsync, &server, &client, &base, &args).await?)
    } else {
        None
    };
    sqlx::raw_sql(&format!("DROP SCHEMA {} CASCADE", schema.name()))
        .execute(&pool)
        .await?;
    Ok(json!({
        "scenario": "console",
        "processed": args.processed,
        "dead_letters": args.dead,
        "pending": args.pending,
        "requests_per_page": args.requests,
        "server_time": "handler (Server-Timing header)",
        "pages": report,
        "slowest_server_p99_ms": slowest,
        "aggregate_page_with_its_index": with_index,
        "relay": relay,
    }))
}
