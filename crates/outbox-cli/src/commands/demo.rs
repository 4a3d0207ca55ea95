//! `outbox demo`: a small order service on a throwaway PostgreSQL, its
//! events relayed to stdout, in either delivery mode (`--mode table`, the
//! default, or `--mode wal`).

use std::io::IsTerminal;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use outbox::{
    DeliveryMode, MigrateOptions, NewEvent, Outbox, Publisher, Relay, RelayConfig, RelayHandle,
    ReplicationTarget, Schema, Status,
};
use outbox_embedded_pg::{PgCluster, PgOptions};
use outbox_publishers::stream::NullPublisher;
use outbox_publishers::StdoutPublisher;
use rand::Rng;

use crate::ctx::Ctx;
use crate::db;
use crate::progress::Progress;

/// Flags of `outbox demo`.
#[derive(Debug, clap::Args)]
pub struct DemoArgs {
    /// Orders to create, 1 to 10000000.
    #[arg(long, default_value_t = 2000, value_parser = clap::value_parser!(u32).range(1..=10_000_000))]
    pub orders: u32,
    /// Concurrent producers, 1 to 64.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub producers: u32,
    /// Do not print the events, only the summary.
    #[arg(long)]
    pub quiet: bool,
    /// The delivery mode to show: `table` (events are rows the relay
    /// claims and deletes) or `wal` (producers call `outbox_emit`, the relay
    /// streams the schema's replication slot; the throwaway PostgreSQL is
    /// started with `wal_level = logical`, a server given by DATABASE_URL
    /// must already run with it).
    #[arg(long, value_name = "MODE", default_value = "table")]
    pub mode: DeliveryMode,
}

/// The throwaway server's settings for `mode`: the WAL mode needs logical
/// decoding, a replication slot and a WAL sender for the relay.
fn cluster_options(mode: DeliveryMode) -> PgOptions {
    let extra_conf = match mode {
        DeliveryMode::Wal => [
            ("wal_level", "logical"),
            ("max_replication_slots", "4"),
            ("max_wal_senders", "4"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect(),
        _ => Vec::new(),
    };
    PgOptions {
        extra_conf,
        ..PgOptions::default()
    }
}

/// Refuses the WAL mode on a server given by DATABASE_URL that does not run
/// with `wal_level = logical`, before anything is written to it.
async fn require_logical(pool: &sqlx::PgPool) -> Result<()> {
    let level: String = sqlx::query_scalar("SELECT current_setting('wal_level')")
        .fetch_one(pool)
        .await?;
    if level != "logical" {
        bail!(
            "outbox demo --mode wal needs wal_level = logical, and the server of DATABASE_URL runs with wal_level = {level}: run ALTER SYSTEM SET wal_level = logical and restart PostgreSQL, or unset DATABASE_URL to let the demo start its own"
        );
    }
    Ok(())
}

pub async fn run(ctx: &Ctx, args: DemoArgs) -> Result<ExitCode> {
    let schema = &ctx.schema;
    if args.orders == 0 || args.producers == 0 {
        bail!("--orders and --producers must be at least 1");
    }
    let wal = args.mode == DeliveryMode::Wal;
    let (_cluster, url) = database(ctx, &args).await?;
    let pool = db::connect(&url, args.producers + 5).await?;
    if wal && ctx.database_url().is_some() {
        require_logical(&pool).await?;
    }
    let slot = prepare(&pool, schema, wal).await?;
    // In the WAL mode `enqueue` calls `outbox_emit`: a logical message, no
    // row.
    let outbox = Outbox::with_schema(schema.clone()).with_delivery(args.mode);
    let relay = start_relay(&pool, schema, &outbox, &args, &url).await?;
    let started = Instant::now();
    // Events go to stdout: draw progress only when they do not share the
    // terminal with it.
    let mut progress = Progress::stderr("demo", args.quiet || !std::io::stdout().is_terminal());
    produce(&pool, &outbox, &args, &relay, &mut progress).await?;
    let committed = Instant::now();
    let (pending, slot_read) = delivered(&pool, schema, &args, &relay, &mut progress).await?;
    progress.finish();
    let elapsed = started.elapsed();
    let stats = relay.shutdown_within(Duration::from_secs(10)).await?;
    let mut conn = pool.acquire().await?;
    let status = Status::read(&mut conn, schema).await?;
    let secs = elapsed.as_secs_f64();
    if wal {
        eprintln!(
            "demo: delivery mode wal: producers called {}.outbox_emit, the relay read replication slot {}",
            schema.name(),
            slot.as_deref().unwrap_or("(none)"),
        );
    }
    eprintln!(
        "demo: {} orders committed by {} producers in {:.2} s; {} events relayed in {:.2} s ({:.0} events/s); pending {}, dead letters {}",
        args.orders,
        args.producers,
        (committed - started).as_secs_f64(),
        stats.delivered,
        secs,
        stats.delivered as f64 / secs,
        status.pending,
        status.dead_letters,
    );
    if wal && ctx.database_url().is_some() {
        // A slot nobody reads keeps the server from removing WAL.
        eprintln!(
            "demo: schema {} stays in the WAL mode: slot {} holds WAL on this server until a relay reads it (docs/operations.md, \"The WAL mode\")",
            schema.name(),
            slot.as_deref().unwrap_or("(none)"),
        );
    }
    if !slot_read {
        bail!(
            "replication slot {} was not read past the last order after 120 s",
            slot.as_deref().unwrap_or("(none)")
        );
    }
    if pending != 0 {
        bail!("{pending} events were still pending after 120 s");
    }
    Ok(ExitCode::SUCCESS)
}

/// The database the demo runs on: `DATABASE_URL`'s, or a throwaway
/// cluster (kept alive by the returned handle).
async fn database(ctx: &Ctx, args: &DemoArgs) -> Result<(Option<PgCluster>, String)> {
    let wal = args.mode == DeliveryMode::Wal;
    Ok(match ctx.database_url() {
        Some(url) => (None, url.clone()),
        None => {
            let options = cluster_options(args.mode);
            let cluster = tokio::task::spawn_blocking(move || PgCluster::start_with(options))
                .await?
                .context("cannot start a throwaway PostgreSQL for the demo (or set DATABASE_URL to use a running server)")?;
            eprintln!(
                "demo: started a throwaway PostgreSQL on 127.0.0.1:{}{} (removed on exit)",
                cluster.port(),
                if wal { " with wal_level = logical" } else { "" }
            );
            let url = cluster.url();
            (Some(cluster), url)
        }
    })
}

/// Migrates the schema (into the WAL mode with `--mode wal`) and creates
/// the orders table; the slot the schema records, if any.
async fn prepare(pool: &sqlx::PgPool, schema: &Schema, wal: bool) -> Result<Option<String>> {
    let mut conn = pool.acquire().await?;
    // `--mode table` leaves the schema's mode as a demo without the
    // flag always has.
    let options = MigrateOptions {
        mode: wal.then_some(DeliveryMode::Wal),
        ..Default::default()
    };
    let report = outbox::migrate(&mut conn, schema, &options).await?;
    sqlx::raw_sql(
        "CREATE TABLE IF NOT EXISTS outbox_demo_orders (
                 id          BIGINT PRIMARY KEY,
                 customer_id BIGINT NOT NULL,
                 total_cents BIGINT NOT NULL,
                 created_at  TIMESTAMPTZ NOT NULL DEFAULT NOW())",
    )
    .execute(&mut *conn)
    .await?;
    Ok(report.slot)
}

/// The relay, embedded, publishing to stdout (or nowhere, `--quiet`).
async fn start_relay(
    pool: &sqlx::PgPool,
    schema: &Schema,
    outbox: &Outbox,
    args: &DemoArgs,
    url: &str,
) -> Result<RelayHandle> {
    let wal = args.mode == DeliveryMode::Wal;
    let publisher: Arc<dyn Publisher> = if args.quiet {
        Arc::new(NullPublisher::default())
    } else {
        Arc::new(StdoutPublisher)
    };
    let mut builder = Relay::builder(pool.clone(), publisher)
        .schema(schema.clone())
        .wakeup(outbox.wakeup())
        .config(RelayConfig {
            instance_id: Some(format!("demo-{}", std::process::id())),
            ..RelayConfig::default()
        });
    if wal {
        // The relay reads the slot over a replication connection to the
        // same server.
        builder = builder.replication(ReplicationTarget::from_url(url)?);
    }
    Ok(builder.spawn().await?)
}

/// The producers: each order and its event in one transaction, until
/// `--orders` are committed; progress meanwhile.
async fn produce(
    pool: &sqlx::PgPool,
    outbox: &Outbox,
    args: &DemoArgs,
    relay: &RelayHandle,
    progress: &mut Progress,
) -> Result<()> {
    let first_id: i64 = sqlx::query_scalar("SELECT COALESCE(max(id), 0) FROM outbox_demo_orders")
        .fetch_one(pool)
        .await?;
    let mut producers = Vec::new();
    for p in 0..args.producers {
        let (pool, outbox) = (pool.clone(), outbox.clone());
        let (orders, k) = (args.orders, args.producers);
        producers.push(tokio::spawn(async move {
            let mut n = p;
            while n < orders {
                let id = first_id + i64::from(n) + 1;
                let customer = i64::from(rand::rng().random_range(1..=50u32));
                let total = i64::from(rand::rng().random_range(100..100_000u32));
                let mut tx = pool.begin().await?;
                sqlx::query("INSERT INTO outbox_demo_orders (id, customer_id, total_cents) VALUES ($1, $2, $3)")
                    .bind(id)
                    .bind(customer)
                    .bind(total)
                    .execute(&mut *tx)
                    .await?;
                let event = NewEvent::new(
                    "order",
                    format!("customer-{customer}"),
                    "order.created",
                    &serde_json::json!({"order_id": id, "customer_id": customer, "total_cents": total}),
                )?;
                outbox.enqueue(&mut *tx, &event).await?;
                tx.commit().await?;
                outbox.wake();
                n += k;
            }
            anyhow::Ok(())
        }));
    }
    let mut redraw = tokio::time::interval(Duration::from_millis(200));
    for mut p in producers {
        loop {
            tokio::select! {
                done = &mut p => { done??; break; }
                _ = redraw.tick() => {
                    let done = relay.stats().delivered;
                    progress.update(done, Some(u64::from(args.orders).saturating_sub(done)));
                }
            }
        }
    }
    Ok(())
}

/// Waits (up to 120 s) until nothing is pending and, in the WAL mode, the
/// slot is read past the last commit: (pending, slot read).
async fn delivered(
    pool: &sqlx::PgPool,
    schema: &Schema,
    args: &DemoArgs,
    relay: &RelayHandle,
    progress: &mut Progress,
) -> Result<(i64, bool)> {
    let wal = args.mode == DeliveryMode::Wal;
    // In the WAL mode the events are delivered once the slot is read past
    // the last commit (those that failed wait in the table, as pending).
    let wal_end: Option<String> = if wal {
        let mut conn = pool.acquire().await?;
        Some(Status::wal_end(&mut conn).await?)
    } else {
        None
    };
    let deadline = Instant::now() + Duration::from_secs(120);
    Ok(loop {
        let mut conn = pool.acquire().await?;
        let pending = Status::pending(&mut conn, schema).await?;
        let slot_read = match &wal_end {
            Some(lsn) => Status::slot_confirmed_to(&mut conn, schema, lsn).await?,
            None => true,
        };
        if (pending == 0 && slot_read) || Instant::now() > deadline {
            break (pending, slot_read);
        }
        let delivered = relay.stats().delivered;
        // The slot does not say how many events it still holds.
        let left = match wal {
            true => u64::from(args.orders).saturating_sub(delivered),
            false => pending as u64,
        };
        progress.update(delivered, Some(left));
        tokio::time::sleep(Duration::from_millis(20)).await;
    })
}
