//! `outbox demo`: a small order service on a throwaway PostgreSQL, its
//! events relayed to stdout.

use std::io::IsTerminal;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use outbox::{NewEvent, Outbox, Publisher, Relay, RelayConfig, Status};
use outbox_embedded_pg::PgCluster;
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
}

pub async fn run(ctx: &Ctx, args: DemoArgs) -> Result<ExitCode> {
    let schema = &ctx.schema;
    if args.orders == 0 || args.producers == 0 {
        bail!("--orders and --producers must be at least 1");
    }
    let (_cluster, url) = match ctx.database_url() {
        Some(url) => (None, url.clone()),
        None => {
            let cluster = tokio::task::spawn_blocking(PgCluster::start)
                .await?
                .context("cannot start a throwaway PostgreSQL for the demo (or set DATABASE_URL to use a running server)")?;
            eprintln!(
                "demo: started a throwaway PostgreSQL on 127.0.0.1:{} (removed on exit)",
                cluster.port()
            );
            let url = cluster.url();
            (Some(cluster), url)
        }
    };
    let pool = db::connect(&url, args.producers + 5).await?;
    {
        let mut conn = pool.acquire().await?;
        outbox::migrate(&mut conn, schema, &Default::default()).await?;
        sqlx::raw_sql(
            "CREATE TABLE IF NOT EXISTS outbox_demo_orders (
                 id          BIGINT PRIMARY KEY,
                 customer_id BIGINT NOT NULL,
                 total_cents BIGINT NOT NULL,
                 created_at  TIMESTAMPTZ NOT NULL DEFAULT NOW())",
        )
        .execute(&mut *conn)
        .await?;
    }

    let outbox = Outbox::with_schema(schema.clone());
    let publisher: Arc<dyn Publisher> = if args.quiet {
        Arc::new(NullPublisher::default())
    } else {
        Arc::new(StdoutPublisher)
    };
    let relay = Relay::builder(pool.clone(), publisher)
        .schema(schema.clone())
        .wakeup(outbox.wakeup())
        .config(RelayConfig {
            instance_id: Some(format!("demo-{}", std::process::id())),
            ..RelayConfig::default()
        })
        .spawn()
        .await?;

    let started = Instant::now();
    let first_id: i64 = sqlx::query_scalar("SELECT COALESCE(max(id), 0) FROM outbox_demo_orders")
        .fetch_one(&pool)
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
    // Events go to stdout: draw progress only when they do not share the
    // terminal with it.
    let mut progress = Progress::stderr("demo", args.quiet || !std::io::stdout().is_terminal());
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
    let committed = Instant::now();

    let deadline = Instant::now() + Duration::from_secs(120);
    let pending = loop {
        let mut conn = pool.acquire().await?;
        let pending = Status::pending(&mut conn, schema).await?;
        if pending == 0 || Instant::now() > deadline {
            break pending;
        }
        progress.update(relay.stats().delivered, Some(pending as u64));
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    progress.finish();
    let elapsed = started.elapsed();
    let stats = relay.shutdown_within(Duration::from_secs(10)).await?;
    let mut conn = pool.acquire().await?;
    let status = Status::read(&mut conn, schema).await?;
    let secs = elapsed.as_secs_f64();
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
    if pending != 0 {
        bail!("{pending} events were still pending after 120 s");
    }
    Ok(ExitCode::SUCCESS)
}
