//! `bench drain --mode wal`: how fast `outbox relay`, as its own process,
//! reads a backlog of the WAL mode's messages from its slot and publishes
//! them (to stdout, sent to /dev/null), against `pg_recvlogical` (PostgreSQL's own
//! client) reading the same messages from an identical slot to /dev/null —
//! the limit of decoding on this server — and against the table mode's
//! relay draining the same events as rows, all in one run. CPU is the
//! relay's process plus its walsender (and its other sessions).

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use outbox::{Schema, WakeupTrigger};
use serde_json::json;
use sqlx::PgPool;

use super::child_relay::child_command;
use super::drain::{preload, DrainArgs};
use super::held_snapshot::cpu_seconds;
use super::recvlogical;
use super::stats::peak_rss_kib_of;
use super::{drop_schemas, drop_slot, event_rows, fresh_schema, fresh_wal_schema, Server};
use crate::ctx::Ctx;

/// Emits `n` events like [`preload`]'s through `outbox_emit`, `per_tx` to a
/// transaction; returns the WAL position after the last commit.
async fn emit_backlog(
    pool: &PgPool,
    schema: &Schema,
    n: u64,
    aggregates: u64,
    per_tx: u64,
) -> Result<String> {
    let sql = format!(
        "SELECT {}.outbox_emit('order', 'order-' || (i % $3), 'order.created',
                jsonb_build_object('order_id', i, 'customer_id', i % 977,
                    'total_cents', (i * 7919) % 100000, 'currency', 'EUR',
                    'lines', jsonb_build_array(jsonb_build_object('sku', 'SKU-' || (i % 50), 'qty', 1 + i % 3)),
                    'note', repeat('x', 60)))
         FROM generate_series($1, $2) AS i",
        schema.name()
    );
    let mut from = 1u64;
    let mut last = Instant::now();
    while from <= n {
        let to = (from + per_tx - 1).min(n);
        sqlx::query(&sql)
            .bind(from as i64)
            .bind(to as i64)
            .bind(aggregates as i64)
            .execute(pool)
            .await?;
        from = to + 1;
        if last.elapsed() > Duration::from_secs(5) {
            eprintln!("bench drain: emitted {} / {n}", from - 1);
            last = Instant::now();
        }
    }
    Ok(sqlx::query_scalar("SELECT pg_current_wal_lsn()::text")
        .fetch_one(pool)
        .await?)
}

/// What one reader of the backlog took.
struct Read {
    secs: f64,
    /// Its process and its walsender, CPU seconds.
    process_cpu: f64,
    walsender_cpu: f64,
    peak_rss_kib: Option<u64>,
}

/// Runs `cmd` until `slot` has confirmed `end` (or, for a `--drain` relay,
/// until it exits), sampling its walsender's CPU.
async fn read_backlog(
    mut cmd: Command,
    pool: &PgPool,
    slot: &str,
    end: &str,
    exits: bool,
) -> Result<Read> {
    cmd.stdout(Stdio::null()).stderr(Stdio::inherit());
    let started = Instant::now();
    let mut child = cmd.spawn().context("cannot start the reader")?;
    let pid = child.id();
    let mut walsender: Option<(u32, f64)> = None;
    let mut walsender_last = 0.0;
    let mut process_last = 0.0;
    let mut rss = None;
    let deadline = Instant::now() + Duration::from_secs(1_800);
    loop {
        if let Some((wpid, start)) = walsender {
            if let Some(now) = cpu_seconds(wpid) {
                walsender_last = now - start;
            }
        } else if let Some((wpid, _)) = recvlogical::walsender_cpu(pool, slot).await? {
            // From its start: the walsender began with the session.
            walsender = Some((wpid, 0.0));
        }
        if let Some(cpu) = cpu_seconds(pid) {
            process_last = cpu;
        }
        rss = peak_rss_kib_of(&pid.to_string()).or(rss);
        let done = if exits {
            child.try_wait()?.is_some()
        } else {
            recvlogical::confirmed(pool, slot, end).await?
        };
        if done {
            break;
        }
        if let Some(status) = child.try_wait()? {
            bail!("the reader ended early with {status}");
        }
        ensure!(
            Instant::now() < deadline,
            "the reader did not finish within 30 minutes"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let secs = started.elapsed().as_secs_f64();
    let _ = child.kill();
    let _ = child.wait();
    Ok(Read {
        secs,
        process_cpu: process_last,
        walsender_cpu: walsender_last,
        peak_rss_kib: rss,
    })
}

/// The three reads of one backlog of `events`.
struct Reads {
    events: u64,
    /// `pg_recvlogical` on the reference slot.
    reference: Read,
    /// `outbox relay` on the WAL mode's slot.
    wal: Read,
    /// `outbox relay --drain` on the same events as rows.
    table: Read,
}

pub async fn run(ctx: &Ctx, fsync: bool, args: DrainArgs) -> Result<serde_json::Value> {
    let server = Server::start(ctx, fsync).await?;
    let pool = server.pool(8).await?;
    require_logical(&pool).await?;
    let n = args.events;

    // The WAL mode's schema and its slot, and the reference's slot on the
    // same publication, both made before the backlog: both hold it whole.
    let schema = fresh_wal_schema(&pool, "bench_drain_wal", WakeupTrigger::default()).await?;
    let slot = outbox::default_slot_name(&schema)?;
    recvlogical::create_slot(&pool).await?;
    eprintln!(
        "bench drain: emitting {n} events, {} per transaction",
        args.per_transaction
    );
    let end = emit_backlog(&pool, &schema, n, args.aggregates, args.per_transaction).await?;

    eprintln!("bench drain: pg_recvlogical reads the reference slot");
    // The publication is the relay's: pgoutput needs one to start.
    let reference = recvlogical::command(&server.url, &slot, Some(&end), 1)?;
    let reference = read_backlog(reference, &pool, recvlogical::SLOT, &end, true).await?;
    let wal = read_wal(&server, &pool, &schema, &slot, &end, &args).await?;
    let (table_schema, table) = drain_table(&server, &pool, &args).await?;
    let reads = Reads {
        events: n,
        reference,
        wal,
        table,
    };
    print_reads(&args, &reads);
    drop_schemas(&pool, &[&schema, &table_schema]).await?;
    drop_slot(&pool, &schema).await?;
    recvlogical::drop_slot(&pool).await?;
    Ok(summary(&args, &reads))
}

/// Refuses a server whose `wal_level` is not `logical`: no slot could be
/// read.
async fn require_logical(pool: &PgPool) -> Result<()> {
    let level: String = sqlx::query_scalar("SELECT current_setting('wal_level')")
        .fetch_one(pool)
        .await?;
    ensure!(
        level == "logical",
        "bench drain --mode wal needs wal_level = logical (the server runs with {level})"
    );
    Ok(())
}

/// `outbox relay`, as its own process, reading the WAL mode's slot to
/// `end`.
async fn read_wal(
    server: &Server,
    pool: &PgPool,
    schema: &Schema,
    slot: &str,
    end: &str,
    args: &DrainArgs,
) -> Result<Read> {
    eprintln!("bench drain: outbox relay reads its slot");
    let mut relay = child_command(
        None,
        &[
            "--publisher",
            "stdout",
            "--schema",
            schema.name(),
            "--batch-size",
            &args.batch_size.to_string(),
        ],
        "bench-drain-wal",
    )?;
    relay.env("DATABASE_URL", &server.url);
    read_backlog(relay, pool, slot, end, false).await
}

/// The table mode's `outbox relay --drain` on the same events as rows, in
/// a schema of its own (returned): every row must be gone.
async fn drain_table(server: &Server, pool: &PgPool, args: &DrainArgs) -> Result<(Schema, Read)> {
    eprintln!("bench drain: the table mode's outbox relay --drain, the same events as rows");
    let table_schema = fresh_schema(pool, "bench_drain_table", WakeupTrigger::default()).await?;
    preload(pool, &table_schema, args.events, args.aggregates).await?;
    let mut table = child_command(
        None,
        &[
            "--publisher",
            "stdout",
            "--schema",
            table_schema.name(),
            "--batch-size",
            &args.batch_size.to_string(),
            "--drain",
        ],
        "bench-drain-table",
    )?;
    table.env("DATABASE_URL", &server.url);
    let table = read_backlog(table, pool, "-", "", true).await?;
    let left = event_rows(pool, &table_schema).await?;
    ensure!(left == 0, "the table relay left {left} rows");
    Ok((table_schema, table))
}

impl Reads {
    /// Events per second of read `r`.
    fn rate(&self, r: &Read) -> f64 {
        self.events as f64 / r.secs
    }

    /// `cpu` seconds as microseconds per event.
    fn us(&self, cpu: f64) -> f64 {
        cpu * 1e6 / self.events as f64
    }
}

/// The report on stdout: each read's rate and CPU per event, and the WAL
/// relay's ratios to the other two.
fn print_reads(args: &DrainArgs, reads: &Reads) {
    let n = args.events;
    let (rate, us) = (|r| reads.rate(r), |cpu| reads.us(cpu));
    let (reference, wal, table) = (&reads.reference, &reads.wal, &reads.table);
    println!(
        "drain --mode wal: {n} events, {} aggregates, {} per transaction",
        args.aggregates, args.per_transaction
    );
    println!(
        "  pg_recvlogical to /dev/null:         {:>9.0} events/s ({:.2} s), its process {:.2} µs + walsender {:.2} µs per event",
        rate(reference), reference.secs, us(reference.process_cpu), us(reference.walsender_cpu)
    );
    println!(
        "  outbox relay, WAL mode (stdout):         {:>9.0} events/s ({:.2} s), its process {:.2} µs + walsender {:.2} µs per event, peak RSS {}",
        rate(wal), wal.secs, us(wal.process_cpu), us(wal.walsender_cpu),
        wal.peak_rss_kib.map_or("-".into(), |k| format!("{:.1} MiB", k as f64 / 1024.0))
    );
    println!(
        "  outbox relay --drain, table mode:     {:>9.0} events/s ({:.2} s), its process {:.2} µs per event, peak RSS {}",
        rate(table),
        table.secs,
        us(table.process_cpu),
        table
            .peak_rss_kib
            .map_or("-".into(), |k| format!("{:.1} MiB", k as f64 / 1024.0))
    );
    println!(
        "  ratios: WAL relay / pg_recvlogical {:.2}, WAL relay / table relay {:.2}",
        rate(wal) / rate(reference),
        rate(wal) / rate(table)
    );
}

/// The run's JSON summary (`bench --json`).
fn summary(args: &DrainArgs, reads: &Reads) -> serde_json::Value {
    let n = args.events;
    let (rate, us) = (|r| reads.rate(r), |cpu| reads.us(cpu));
    let (reference, wal, table) = (&reads.reference, &reads.wal, &reads.table);
    json!({
        "scenario": "drain_wal",
        "events": n,
        "aggregates": args.aggregates,
        "per_transaction": args.per_transaction,
        "recvlogical_events_per_sec": rate(reference),
        "recvlogical_us_per_event": us(reference.process_cpu),
        "recvlogical_walsender_us_per_event": us(reference.walsender_cpu),
        "wal_relay_events_per_sec": rate(wal),
        "wal_relay_process_us_per_event": us(wal.process_cpu),
        "wal_relay_walsender_us_per_event": us(wal.walsender_cpu),
        "wal_relay_peak_rss_mib": wal.peak_rss_kib.map(|k| k as f64 / 1024.0),
        "table_relay_events_per_sec": rate(table),
        "table_relay_process_us_per_event": us(table.process_cpu),
        "table_relay_peak_rss_mib": table.peak_rss_kib.map(|k| k as f64 / 1024.0),
        "ratio_to_recvlogical": rate(wal) / rate(reference),
        "ratio_to_table": rate(wal) / rate(table),
    })
}
