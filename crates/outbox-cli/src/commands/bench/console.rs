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

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};
use clap::Args;
use serde_json::json;
use sqlx::PgPool;

use super::latency::{self, LatencyArgs, Producer};
use super::stats::{median, ms, quantile};
use super::{fresh_schema, Server};
use crate::commands::Ctx;

/// How often the overview page asks for fresh figures (console.js).
const REFRESH: Duration = Duration::from_secs(3);

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

/// A page the benchmark requests: its name in the report and its path.
struct Page {
    name: &'static str,
    path: String,
}

/// Server and client times of one page's requests, sorted.
struct Timed {
    server: Vec<Duration>,
    client: Vec<Duration>,
}

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

    let addr = crate::console::spawn_loopback(pool.clone(), &schema, "127.0.0.1:0").await?;
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

/// The pages requested, with paths naming rows of the fill.
async fn pages(pool: &PgPool, schema: &outbox::Schema) -> Result<Vec<Page>> {
    let s = schema.name();
    let dead_id: Option<uuid::Uuid> = sqlx::query_scalar(&format!(
        "SELECT id FROM {s}.outbox_events WHERE dead_lettered_at IS NOT NULL AND processed_at IS NULL
         ORDER BY seq LIMIT 1"
    ))
    .fetch_optional(pool)
    .await?;
    // A keyset position half-way through the dead letters.
    let dead_middle: Option<i64> = sqlx::query_scalar(&format!(
        "SELECT seq FROM {s}.outbox_events WHERE dead_lettered_at IS NOT NULL AND processed_at IS NULL
         ORDER BY seq OFFSET (SELECT count(*) / 2 FROM {s}.outbox_events
                              WHERE dead_lettered_at IS NOT NULL AND processed_at IS NULL) LIMIT 1"
    ))
    .fetch_optional(pool)
    .await?;
    let hour_ago = (chrono::Utc::now() - chrono::Duration::hours(1)).format("%Y-%m-%dT%H:%M");
    let mut pages = vec![
        ("overview", "/".to_owned()),
        ("overview.json (refresh)", "/overview.json".to_owned()),
        ("stuck aggregates", "/stuck".to_owned()),
        ("events: pending", "/events?state=pending".to_owned()),
        ("events: retrying", "/events?state=retrying".to_owned()),
        ("events: dead", "/events?state=dead".to_owned()),
        ("events: processed", "/events?state=processed".to_owned()),
        (
            "events: an aggregate",
            "/events?aggregate_type=order&aggregate_id=agg-3".to_owned(),
        ),
        (
            "events: type, last hour",
            format!("/events?event_type=order.paid&from={hour_ago}"),
        ),
        ("dead letters", "/dead-letters".to_owned()),
        (
            "dead letters: one type",
            "/dead-letters?aggregate_type=payment".to_owned(),
        ),
        (
            "dead letters: error text",
            "/dead-letters?error=unprocessable".to_owned(),
        ),
    ];
    if let Some(seq) = dead_middle {
        pages.push((
            "dead letters: middle page",
            format!("/dead-letters?after={seq}"),
        ));
    }
    if let Some(id) = dead_id {
        pages.push(("event detail", format!("/events/{id}")));
    }
    Ok(pages
        .into_iter()
        .map(|(name, path)| Page { name, path })
        .collect())
}

/// Requests `page` `n` times after one untimed request (so every page
/// starts from a warm cache), prints and returns its percentiles.
async fn time_page(
    client: &reqwest::Client,
    base: &str,
    page: &Page,
    n: u32,
) -> Result<serde_json::Value> {
    get(client, base, &page.path).await?;
    let mut t = Timed {
        server: Vec::new(),
        client: Vec::new(),
    };
    for _ in 0..n {
        let (server_time, client_time) = get(client, base, &page.path).await?;
        t.server.push(server_time);
        t.client.push(client_time);
    }
    t.server.sort();
    t.client.sort();
    let (p50, p99) = (quantile(&t.server, 0.5), quantile(&t.server, 0.99));
    let (c50, c99) = (quantile(&t.client, 0.5), quantile(&t.client, 0.99));
    println!(
        "  {:<28} server p50 {:>7.1} ms  p99 {:>7.1} ms   client p50 {:>7.1} ms  p99 {:>7.1} ms",
        page.name,
        ms(p50),
        ms(p99),
        ms(c50),
        ms(c99)
    );
    Ok(json!({
        "page": page.name, "path": page.path,
        "server_p50_ms": ms(p50), "server_p99_ms": ms(p99),
        "client_p50_ms": ms(c50), "client_p99_ms": ms(c99),
    }))
}

/// One GET: the handler's time (its `Server-Timing`) and the client's.
async fn get(client: &reqwest::Client, base: &str, path: &str) -> Result<(Duration, Duration)> {
    let started = Instant::now();
    let r = client.get(format!("{base}{path}")).send().await?;
    let status = r.status();
    let timing = r
        .headers()
        .get("server-timing")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("handler;dur="))
        .and_then(|v| v.parse::<f64>().ok());
    let body = r.bytes().await?;
    let client_time = started.elapsed();
    ensure!(
        status.is_success(),
        "GET {path} answered {status}: {}",
        String::from_utf8_lossy(&body[..body.len().min(300)])
    );
    let server_time = timing.context("the console sent no Server-Timing")?;
    Ok((Duration::from_secs_f64(server_time / 1000.0), client_time))
}

/// The relay's black-box latency at `--rate` without and with consoles
/// refreshing the overview, `--pairs` of each in the order without, with,
/// with, without, … (so a drift of the machine weighs on both alike); the
/// median p99 of each and their ratio.
async fn relay_with_and_without(
    ctx: &Ctx,
    fsync: bool,
    server: &Server,
    client: &reqwest::Client,
    base: &str,
    args: &ConsoleArgs,
) -> Result<serde_json::Value> {
    // `bench latency` on this same server: its Server helper uses a
    // configured database URL as it is.
    let mut loaded = ctx.loaded.clone();
    loaded.config.database_url = Some(server.url.clone());
    let same_server = Ctx {
        loaded,
        schema: ctx.schema.clone(),
    };
    let latency_args = || LatencyArgs {
        rate: args.rate,
        seconds: args.seconds,
        connections: 32,
        producer: Producer::Sql,
        wakeup_trigger: None,
        idle_secs: 2,
    };
    let mut without = Vec::new();
    let mut with = Vec::new();
    let mut refreshes = 0;
    for run in 0..2 * args.pairs {
        // without, with, with, without, without, with, …
        let console_open = matches!(run % 4, 1 | 2);
        if !console_open {
            eprintln!("bench console: the relay at {} /s, no console", args.rate);
            without.push(latency::run(&same_server, fsync, latency_args()).await?);
            continue;
        }
        eprintln!(
            "bench console: the relay at {} /s, {} console(s) refreshing",
            args.rate, args.viewers
        );
        let viewers = Viewers::open(client, base, args.viewers);
        let measured = latency::run(&same_server, fsync, latency_args()).await;
        let (done, failed) = viewers.close();
        ensure!(failed == 0, "{failed} of the consoles' refreshes failed");
        refreshes += done;
        with.push(measured?);
    }
    let p99s = |runs: &[serde_json::Value]| -> Vec<f64> {
        runs.iter()
            .map(|v| v["p99_ms"].as_f64().unwrap_or(f64::NAN))
            .collect()
    };
    let (p99_without, p99_with) = (median(p99s(&without)), median(p99s(&with)));
    let ratio = p99_with / p99_without;
    println!(
        "console: relay p99 at {} /s, median of {} runs each: {p99_without:.2} ms without a console \
         {:?}, {p99_with:.2} ms with {} refreshing {:?} ({refreshes} refreshes): {ratio:.2}×",
        args.rate,
        args.pairs,
        p99s(&without),
        args.viewers,
        p99s(&with),
    );
    Ok(json!({
        "rate": args.rate,
        "seconds": args.seconds,
        "viewers": args.viewers,
        "refreshes": refreshes,
        "p99_ms_without": p99_without,
        "p99_ms_with": p99_with,
        "p99_ratio": ratio,
        "without": without,
        "with": with,
    }))
}

/// Consoles polling `/overview.json` at the page's interval, as open
/// overview pages do, each started at its own offset in the interval.
struct Viewers {
    stop: Arc<AtomicBool>,
    done: Arc<AtomicU64>,
    failed: Arc<AtomicU64>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Viewers {
    fn open(client: &reqwest::Client, base: &str, n: u32) -> Viewers {
        let stop = Arc::new(AtomicBool::new(false));
        let done = Arc::new(AtomicU64::new(0));
        let failed = Arc::new(AtomicU64::new(0));
        let tasks = (0..n)
            .map(|v| {
                let (client, url) = (client.clone(), format!("{base}/overview.json"));
                let (stop, done, failed) = (stop.clone(), done.clone(), failed.clone());
                let offset = REFRESH.mul_f64(f64::from(v) / f64::from(n));
                tokio::spawn(async move {
                    tokio::time::sleep(offset).await;
                    let mut tick = tokio::time::interval(REFRESH);
                    while !stop.load(Ordering::Relaxed) {
                        tick.tick().await;
                        let ok = match client.get(&url).send().await {
                            Ok(r) => r.status().is_success() && r.bytes().await.is_ok(),
                            Err(_) => false,
                        };
                        let counter = if ok { &done } else { &failed };
                        counter.fetch_add(1, Ordering::Relaxed);
                    }
                })
            })
            .collect();
        Viewers {
            stop,
            done,
            failed,
            tasks,
        }
    }

    /// Stops them: the refreshes done and failed.
    fn close(self) -> (u64, u64) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.tasks {
            t.abort();
        }
        (
            self.done.load(Ordering::Relaxed),
            self.failed.load(Ordering::Relaxed),
        )
    }
}
