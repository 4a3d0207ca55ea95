//! `bench drain`: how fast the relay empties a backlog, against plain SQL
//! on the same server.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{ensure, Result};
use clap::Args;
use outbox::{Event, Publisher, Relay, RelayConfig, Schema, WakeupTrigger};
use outbox_publishers::stream::NullPublisher;
use outbox_publishers::{Envelope, Format, Template};
use serde_json::json;
use sqlx::PgPool;

use super::stats::{cpu_secs, peak_rss_kib, reset_peak_rss};
use super::{drop_schemas, event_rows, fresh_schema, Server};
use crate::ctx::Ctx;

#[derive(Debug, Args)]
pub struct DrainArgs {
    /// Events to preload (one statement), 1 to 10000000.
    #[arg(long, default_value_t = 200_000, value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
    pub events: u64,
    /// Distinct aggregates the events spread over, 1 to 10000000.
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
    pub aggregates: u64,
    /// The relay's batch size, 1 to 100000 (the relay's own limit).
    #[arg(
        long,
        default_value_t = 1_000,
        value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=100_000)
    )]
    pub batch_size: usize,
    /// The reference's batch size (`DELETE … RETURNING` per batch), 1 to
    /// 100000.
    #[arg(long, default_value_t = 1_000, value_parser = clap::value_parser!(i64).range(1..=100_000))]
    pub reference_batch: i64,
    /// Build each event's message in this format before dropping it (plain,
    /// cloudevents-binary or cloudevents-structured; Kafka's header names):
    /// what a format costs the relay. Left out, the null publisher builds
    /// nothing.
    #[arg(long, value_name = "FORMAT", value_parser = parse_format)]
    pub format: Option<Format>,
    /// Also fill in this destination template for each event, as a
    /// templated broker publisher does (e.g. `{aggregate_type}.{event_type}`;
    /// the syntax of docs/publishers.md): what rendering destinations costs
    /// the relay. The building-alone figure then also shows the same
    /// destinations made by `Event::destination`'s plain replacing.
    #[arg(long, value_name = "TEMPLATE", value_parser = parse_destination)]
    pub destination: Option<Template>,
    /// `wal`: the WAL mode's relay as its own process, reading its slot,
    /// against `pg_recvlogical` on an identical slot and the table mode's
    /// relay (`bench drain --mode wal`; needs `wal_level = logical`, which
    /// the throwaway server has). Left out: the table mode, as above.
    #[arg(long, value_name = "MODE")]
    pub mode: Option<outbox::DeliveryMode>,
    /// With `--mode wal`: events per producer transaction in the backlog,
    /// 1 to 100000.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=100_000))]
    pub per_transaction: u64,
}

fn parse_format(s: &str) -> Result<Format, String> {
    s.parse()
}

fn parse_destination(s: &str) -> Result<Template, String> {
    Template::parse("--destination", s).map_err(|e| e.to_string())
}

/// Inserts `n` events of ~200-byte payloads over `aggregates` aggregates in
/// one statement, then vacuums so both runs start from the same state.
pub async fn preload(pool: &PgPool, schema: &Schema, n: u64, aggregates: u64) -> Result<()> {
    let s = schema.name();
    sqlx::query(&format!(
        "INSERT INTO {s}.outbox_events (aggregate_type, aggregate_id, event_type, payload)
         SELECT 'order', 'order-' || (i % $2), 'order.created',
                jsonb_build_object('order_id', i, 'customer_id', i % 977,
                    'total_cents', (i * 7919) % 100000, 'currency', 'EUR',
                    'lines', jsonb_build_array(jsonb_build_object('sku', 'SKU-' || (i % 50), 'qty', 1 + i % 3)),
                    'note', repeat('x', 60))
         FROM generate_series(1, $1) AS i"
    ))
    .bind(n as i64)
    .bind(aggregates as i64)
    .execute(pool)
    .await?;
    sqlx::raw_sql(&format!("VACUUM ANALYZE {s}.outbox_events"))
        .execute(pool)
        .await?;
    Ok(())
}

/// The reference: plain SQL on one connection, `DELETE … RETURNING` the
/// whole row in seq-ordered batches until the table is empty.
async fn reference(pool: &PgPool, schema: &Schema, batch: i64) -> Result<(u64, Duration)> {
    let s = schema.name();
    let sql = format!(
        "DELETE FROM {s}.outbox_events WHERE id IN (
             SELECT id FROM {s}.outbox_events
             WHERE processed_at IS NULL AND dead_lettered_at IS NULL
             ORDER BY seq LIMIT $1)
         RETURNING *"
    );
    let mut conn = pool.acquire().await?;
    let started = Instant::now();
    let mut total = 0u64;
    loop {
        let rows = sqlx::query(&sql).bind(batch).fetch_all(&mut *conn).await?;
        if rows.is_empty() {
            break;
        }
        total += rows.len() as u64;
    }
    Ok((total, started.elapsed()))
}

/// The relay with a null publisher, embedded in this process; also the
/// process's peak RSS and the CPU time it used while the relay ran (nothing
/// else of this process works meanwhile; less sensitive than the rate to
/// other load on a shared machine).
async fn relay(
    pool: &PgPool,
    schema: &Schema,
    n: u64,
    batch: usize,
    format: Option<Format>,
    destination: Option<&Template>,
) -> Result<(u64, Duration, Option<u64>, Option<f64>)> {
    let rss_reset = reset_peak_rss();
    let cpu_before = cpu_secs();
    let publisher = Arc::new(null_publisher(schema, format, destination));
    let started = Instant::now();
    let handle = Relay::builder(pool.clone(), publisher.clone())
        .schema(schema.clone())
        .config(RelayConfig {
            instance_id: Some("bench-drain".into()),
            batch_size: batch,
            ..RelayConfig::default()
        })
        .spawn()
        .await?;
    let deadline = Instant::now() + Duration::from_secs(3_600);
    let mut last_print = Instant::now();
    while handle.stats().delivered < n {
        ensure!(
            Instant::now() < deadline,
            "relay did not drain within an hour"
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
        if last_print.elapsed() > Duration::from_secs(5) {
            eprintln!("bench: relay {} / {n}", handle.stats().delivered);
            last_print = Instant::now();
        }
    }
    let elapsed = started.elapsed();
    let cpu = cpu_before.zip(cpu_secs()).map(|(a, b)| b - a);
    let stats = handle.shutdown().await?;
    let rss = if rss_reset { peak_rss_kib() } else { None };
    Ok((stats.delivered, elapsed, rss, cpu))
}

/// The bench's null publisher: building messages in `format` and filling in
/// `destination` when given, else doing nothing.
fn null_publisher(
    schema: &Schema,
    format: Option<Format>,
    destination: Option<&Template>,
) -> NullPublisher {
    let publisher = match format {
        Some(format) => {
            NullPublisher::rendering(Envelope::new(format, format!("/outbox/{}", schema.name())))
        }
        None => NullPublisher::default(),
    };
    match destination {
        Some(template) => publisher.with_destination(template.clone()),
        None => publisher,
    }
}

/// Event `i` as [`preload`] writes it (no headers, no topic override).
fn event_like_preloaded(i: i64) -> Event {
    let payload = json!({
        "order_id": i, "customer_id": i % 977, "total_cents": (i * 7919) % 100_000,
        "currency": "EUR", "lines": [{"sku": format!("SKU-{}", i % 50), "qty": 1 + i % 3}],
        "note": "x".repeat(60),
    });
    Event {
        id: uuid::Uuid::now_v7(),
        seq: i,
        aggregate_type: "order".into(),
        aggregate_id: format!("order-{}", i % 10_000),
        event_type: "order.created".into(),
        payload: payload.to_string(),
        headers: Default::default(),
        topic: None,
        attempts: 0,
        created_at: chrono::Utc::now(),
        partition: 0,
    }
}

/// What building the messages alone took (see [`build_only`]).
struct Built {
    /// Through the bench's null publisher.
    publisher: Duration,
    /// The same destinations made by `Event::destination` (plain replacing
    /// of `{aggregate_type}` and `{event_type}`), when a template was given.
    replacing: Option<Duration>,
}

/// Builds `n` messages (events like the preloaded ones, in batches of
/// 1,000, through the same null publisher) with nothing else running: the
/// format's and the destination's own cost, apart from the database's.
async fn build_only(
    format: Option<Format>,
    destination: Option<&Template>,
    schema: &Schema,
    n: u64,
) -> Result<Built> {
    let batch: Vec<Event> = (0..1_000).map(event_like_preloaded).collect();
    let publisher = null_publisher(schema, format, destination);
    let started = Instant::now();
    for _ in 0..n.div_ceil(1_000) {
        publisher
            .publish(&batch)
            .await
            .map_err(|e| anyhow::anyhow!("{e}"))?;
    }
    let publisher = started.elapsed();
    let replacing = destination.map(|template| {
        let started = Instant::now();
        for _ in 0..n.div_ceil(1_000) {
            for event in &batch {
                std::hint::black_box(event.destination(template.as_str()));
            }
        }
        started.elapsed()
    });
    Ok(Built {
        publisher,
        replacing,
    })
}

/// What `bench drain` measured, over `--events` events.
struct Drained {
    /// How long the reference took.
    reference: Duration,
    /// How long the relay took.
    relay: Duration,
    /// The relay's process: peak RSS (KiB) and CPU seconds, where read.
    rss: Option<u64>,
    cpu: Option<f64>,
    /// Building the messages alone, with `--format` or `--destination`.
    built: Option<Built>,
}

impl Drained {
    fn reference_rate(&self, n: u64) -> f64 {
        n as f64 / self.reference.as_secs_f64()
    }

    fn relay_rate(&self, n: u64) -> f64 {
        n as f64 / self.relay.as_secs_f64()
    }
}

pub async fn run(ctx: &Ctx, fsync: bool, args: DrainArgs) -> Result<serde_json::Value> {
    refuse_header_destination(&args)?;
    let server = Server::start(ctx, fsync).await?;
    let pool = server.pool(8).await?;
    let n = args.events;
    let (reference_schema, reference) = drain_reference(&pool, &args).await?;
    let (relay_schema, relay, rss, cpu) = drain_relay(&pool, &args).await?;
    let built = match (args.format, &args.destination) {
        (None, None) => None,
        (format, destination) => {
            Some(build_only(format, destination.as_ref(), &relay_schema, n).await?)
        }
    };
    let drained = Drained {
        reference,
        relay,
        rss,
        cpu,
        built,
    };
    print_drained(&args, &drained);
    drop_schemas(&pool, &[&reference_schema, &relay_schema]).await?;
    Ok(summary(&args, &drained))
}

/// Refuses a `--destination` that needs a header: the preloaded events
/// carry none, so the template would reject every event and the relay
/// would never drain.
fn refuse_header_destination(args: &DrainArgs) -> Result<()> {
    if let Some(template) = &args.destination {
        if let Err(missing) = template.render(&event_like_preloaded(0)) {
            anyhow::bail!(
                "bench drain: the preloaded events have no headers, so every one would be rejected: {missing}"
            );
        }
    }
    Ok(())
}

/// The reference's run on a schema of its own, preloaded: the schema and
/// how long the drain took.
async fn drain_reference(pool: &PgPool, args: &DrainArgs) -> Result<(Schema, Duration)> {
    let n = args.events;
    eprintln!("bench drain: preloading {n} events for the reference");
    let schema = fresh_schema(pool, "bench_reference", WakeupTrigger::Off).await?;
    preload(pool, &schema, n, args.aggregates).await?;
    let (ref_n, ref_t) = reference(pool, &schema, args.reference_batch).await?;
    ensure!(ref_n == n, "reference drained {ref_n} of {n}");
    Ok((schema, ref_t))
}

/// The relay's run on a schema of its own, preloaded: the schema, how
/// long the drain took, the peak RSS and the CPU time ([`relay`]).
/// Every row must be gone.
async fn drain_relay(
    pool: &PgPool,
    args: &DrainArgs,
) -> Result<(Schema, Duration, Option<u64>, Option<f64>)> {
    let n = args.events;
    eprintln!("bench drain: preloading {n} events for the relay");
    let schema = fresh_schema(pool, "bench_relay", WakeupTrigger::Off).await?;
    preload(pool, &schema, n, args.aggregates).await?;
    let (relay_n, relay_t, rss, cpu) = relay(
        pool,
        &schema,
        n,
        args.batch_size,
        args.format,
        args.destination.as_ref(),
    )
    .await?;
    let left = event_rows(pool, &schema).await?;
    ensure!(
        left == 0 && relay_n == n,
        "relay left {left} rows, delivered {relay_n} of {n}"
    );
    Ok((schema, relay_t, rss, cpu))
}

/// The report on stdout: both rates and their ratio, then what the
/// relay's process used and what building the messages alone took.
fn print_drained(args: &DrainArgs, d: &Drained) {
    let n = args.events;
    let ref_rate = d.reference_rate(n);
    let relay_rate = d.relay_rate(n);
    let ratio = relay_rate / ref_rate;
    println!("drain: {n} events, {} aggregates", args.aggregates);
    println!(
        "  reference (DELETE … RETURNING, batches of {}): {:>9.0} events/s ({:.2} s)",
        args.reference_batch,
        ref_rate,
        d.reference.as_secs_f64()
    );
    let publisher = match (args.format, &args.destination) {
        (Some(f), None) => format!("null publisher, {f} messages built):"),
        (None, None) => "null publisher):             ".to_owned(),
        (f, Some(t)) => format!(
            "null publisher, {} messages built, destination {t}):",
            f.map_or("no", Format::name)
        ),
    };
    println!(
        "  relay (batch {}, {publisher} {:>9.0} events/s ({:.2} s)",
        args.batch_size,
        relay_rate,
        d.relay.as_secs_f64()
    );
    println!("  ratio relay / reference: {ratio:.2}");
    if let Some(kib) = d.rss {
        println!("  relay process peak RSS: {:.1} MiB", kib as f64 / 1024.0);
    }
    if let Some(built) = &d.built {
        let per_event = |d: Duration| d.as_secs_f64() * 1e6 / n as f64;
        println!(
            "  building the {n} messages alone: {:.3} s ({:.2} µs per event)",
            built.publisher.as_secs_f64(),
            per_event(built.publisher)
        );
        if let Some(replacing) = built.replacing {
            println!(
                "  the same destinations by plain replacing (Event::destination): {:.3} s ({:.2} µs per event)",
                replacing.as_secs_f64(),
                per_event(replacing)
            );
        }
    }
    if let Some(cpu) = d.cpu {
        println!(
            "  relay process CPU: {cpu:.2} s ({:.2} µs per event)",
            cpu * 1e6 / n as f64
        );
    }
}

/// The run's JSON summary (`bench --json`).
fn summary(args: &DrainArgs, d: &Drained) -> serde_json::Value {
    let n = args.events;
    let ref_rate = d.reference_rate(n);
    let relay_rate = d.relay_rate(n);
    json!({
        "scenario": "drain",
        "events": n,
        "aggregates": args.aggregates,
        "reference_events_per_sec": ref_rate,
        "relay_events_per_sec": relay_rate,
        "ratio": relay_rate / ref_rate,
        "format": args.format.map(Format::name),
        "relay_peak_rss_mib": d.rss.map(|k| k as f64 / 1024.0),
        "relay_cpu_secs": d.cpu,
        "destination": args.destination.as_ref().map(Template::as_str),
        "build_only_secs": d.built.as_ref().map(|b| b.publisher.as_secs_f64()),
        "replacing_only_secs": d.built.as_ref().and_then(|b| b.replacing).map(|d| d.as_secs_f64()),
    })
}
