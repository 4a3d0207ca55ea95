//! The benchmarks of the outbox, run as `outbox bench` (the `outbox`
//! program's `bench` feature hands them [`BenchArgs`] and a [`Ctx`]): the
//! project measured against a reference on the same server in the same
//! run, so results are ratios that hold on a noisy machine. Every scenario
//! and its references live here, with the brokers' own clients they need;
//! a relay built without the feature links none of it.
#![forbid(unsafe_code)]

mod child_relay;
mod console;
mod ctx;
mod db;
mod drain;
mod drain_wal;
mod e2e;
mod held_snapshot;
mod latency;
mod produce;
mod recvlogical;
mod relay_cpu;
mod sources;
mod stats;

use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{Context, Result};
use clap::{Args, Subcommand};
use outbox::Schema;
use outbox_embedded_pg::{PgCluster, PgOptions};
use sqlx::{ConnectOptions, PgConnection, PgPool};

pub use crate::ctx::{Ctx, ServeConsole};

/// Options shared by every scenario.
#[derive(Debug, Args)]
pub struct BenchArgs {
    #[command(subcommand)]
    pub scenario: Scenario,
    /// Print one JSON object with every figure as the last line.
    #[arg(long, global = true)]
    pub json: bool,
    /// Run the throwaway server without fsync (faster, less realistic).
    #[arg(long, global = true)]
    pub no_fsync: bool,
}

#[derive(Debug, Subcommand)]
pub enum Scenario {
    /// Drain a preloaded backlog: the relay against plain SQL
    /// `DELETE … RETURNING` batches.
    Drain(drain::DrainArgs),
    /// Commit-to-delivery latency under an open-loop producer: the library
    /// with an embedded relay, or plain SQL with `outbox relay` as a child
    /// process.
    Latency(latency::LatencyArgs),
    /// Producer throughput at several producer counts: `enqueue` + wake-up,
    /// the seed's NOTIFY trigger and the default wake-up trigger with a
    /// relay running, each against a plain INSERT.
    Produce(produce::ProduceArgs),
    /// Steadiness while something holds an old snapshot: a steady
    /// plain-SQL producer, `outbox relay` as a child process, and a
    /// `REPEATABLE READ` transaction held for `--hold` seconds; database CPU
    /// per event at the end of the hold against before it.
    HeldSnapshot(held_snapshot::HeldSnapshotArgs),
    /// End to end through a real broker (RabbitMQ, NATS JetStream, Redis
    /// Streams or a webhook): a consumer reads every message back and
    /// checks completeness and per-aggregate order; drain against the
    /// broker's own client, and commit-to-consumer latency with the
    /// relay's CPU per event at steady rates.
    E2e(e2e::E2eArgs),
    /// The web console on a large outbox (1,000,000 delivered rows kept,
    /// 100,000 pending, 100,000 dead letters by default): each page's
    /// server time p50/p99, then the relay's p99 at 500/s (plain-SQL
    /// producers, child relay) without and with consoles refreshing.
    Console(console::ConsoleArgs),
    /// One relay serving many sources: with 200 idle tenant schemas its
    /// connections, CPU and wake-up latency; draining 200 schemas against
    /// one; a steady source's p99 beside another's backlog.
    Sources(sources::SourcesArgs),
}

/// The server a scenario runs on: a throwaway cluster unless DATABASE_URL
/// is set.
pub struct Server {
    pub url: String,
    _cluster: Option<PgCluster>,
}

impl Server {
    pub async fn start(ctx: &Ctx, fsync: bool) -> Result<Server> {
        if let Some(url) = ctx.database_url() {
            return Ok(Server {
                url: url.clone(),
                _cluster: None,
            });
        }
        let cluster = tokio::task::spawn_blocking(move || {
            PgCluster::start_with(PgOptions {
                fsync,
                // The WAL mode's benchmarks read a logical slot; every
                // variant of a run shares the server, so ratios compare
                // like with like.
                extra_conf: vec![("wal_level".into(), "logical".into())],
                ..PgOptions::default()
            })
        })
        .await?
        .context("cannot start a throwaway PostgreSQL (or set DATABASE_URL)")?;
        eprintln!(
            "bench: throwaway PostgreSQL on 127.0.0.1:{} (fsync {})",
            cluster.port(),
            if fsync { "on" } else { "off" }
        );
        Ok(Server {
            url: cluster.url(),
            _cluster: Some(cluster),
        })
    }

    pub async fn pool(&self, max: u32) -> Result<PgPool> {
        db::connect_flagging_slow(&self.url, max, std::time::Duration::from_secs(3_600)).await
    }

    /// [`Server::pool`], its sessions named `name` (`application_name`),
    /// so the database's CPU can be told apart by who spent it.
    pub async fn named_pool(&self, max: u32, name: &str) -> Result<PgPool> {
        let options = db::check_url(&self.url)?.application_name(name);
        sqlx::postgres::PgPoolOptions::new()
            .max_connections(max)
            .connect_with(options)
            .await
            .with_context(|| {
                format!(
                    "cannot connect to {}",
                    outbox::redact::redact_url(&self.url)
                )
            })
    }

    /// A pool for an open-loop schedule: when the server falls behind,
    /// transactions wait up to `wait` for a connection (and are counted
    /// late) instead of failing the run after the usual connect timeout.
    pub async fn producer_pool(&self, max: u32, wait: std::time::Duration) -> Result<PgPool> {
        let options = db::check_url(&self.url)?
            .log_statements(log::LevelFilter::Debug)
            .log_slow_statements(
                log::LevelFilter::Warn,
                std::time::Duration::from_secs(3_600),
            );
        sqlx::postgres::PgPoolOptions::new()
            .max_connections(max)
            .acquire_timeout(wait)
            .acquire_slow_threshold(wait)
            .connect_with(options)
            .await
            .with_context(|| format!("cannot connect to {}", db::redact_text(&self.url)))
    }
}

/// Drops the WAL mode's slot and publication of `schema` (named as
/// `outbox migrate --mode wal` names them by default), if no one reads the
/// slot: what a benchmark leaves behind would otherwise hold WAL.
pub async fn drop_slot(pool: &PgPool, schema: &Schema) -> Result<()> {
    let name = outbox::default_slot_name(schema)?;
    sqlx::query("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1 AND NOT active")
        .bind(&name)
        .execute(pool)
        .await?;
    sqlx::raw_sql(&format!("DROP PUBLICATION IF EXISTS {name}"))
        .execute(pool)
        .await?;
    Ok(())
}

/// Drops each of `schemas` with all it holds: a run leaves no schema of
/// its own behind.
pub async fn drop_schemas(pool: &PgPool, schemas: &[&Schema]) -> Result<()> {
    for s in schemas {
        sqlx::raw_sql(&format!("DROP SCHEMA {} CASCADE", s.name()))
            .execute(pool)
            .await?;
    }
    Ok(())
}

/// [`fresh_schema`] in the WAL mode: a slot left by an earlier run goes
/// first (its name is the schema's, and it would hold WAL for nothing).
pub async fn fresh_wal_schema(
    pool: &PgPool,
    name: &str,
    wakeup: outbox::WakeupTrigger,
) -> Result<Schema> {
    let schema = fresh_schema(pool, name, wakeup).await?;
    drop_slot(pool, &schema).await?;
    let mut conn = pool.acquire().await?;
    outbox::migrate(
        &mut conn,
        &schema,
        &outbox::MigrateOptions {
            mode: Some(outbox::DeliveryMode::Wal),
            ..Default::default()
        },
    )
    .await?;
    Ok(schema)
}

/// Drops and re-creates `schema` and migrates it with the wake-up trigger
/// `wakeup`.
pub async fn fresh_schema(
    pool: &PgPool,
    name: &str,
    wakeup: outbox::WakeupTrigger,
) -> Result<Schema> {
    let schema = Schema::new(name)?;
    sqlx::raw_sql(&format!("DROP SCHEMA IF EXISTS {name} CASCADE"))
        .execute(pool)
        .await?;
    let mut conn = pool.acquire().await?;
    outbox::migrate(
        &mut conn,
        &schema,
        &outbox::MigrateOptions {
            partitions: None,
            notify_trigger: None,
            wakeup: Some(wakeup),
            ..Default::default()
        },
    )
    .await?;
    Ok(schema)
}

/// Creates the seed's `orders` table in `schema`: each order transaction
/// writes one row here and its event.
pub async fn create_orders(pool: &PgPool, schema: &Schema) -> Result<()> {
    sqlx::raw_sql(&format!(
        "CREATE TABLE {}.orders (
             id BIGINT PRIMARY KEY, customer_id BIGINT NOT NULL,
             total_cents BIGINT NOT NULL, created_at TIMESTAMPTZ NOT NULL DEFAULT NOW())",
        schema.name()
    ))
    .execute(pool)
    .await?;
    Ok(())
}

/// The statement that inserts an order (`$1` id, `$2` customer, `$3`
/// total) into `schema`'s `orders` table, for [`insert_order`].
pub fn order_insert(schema: &Schema) -> Arc<str> {
    format!(
        "INSERT INTO {}.orders (id, customer_id, total_cents) VALUES ($1, $2, $3)",
        schema.name()
    )
    .into()
}

/// Inserts order `id` on `conn` with `sql` (an [`order_insert`]), its
/// customer and total derived from the id as in every scenario.
pub async fn insert_order(conn: &mut PgConnection, sql: &str, id: i64) -> Result<()> {
    sqlx::query(sql)
        .bind(id)
        .bind(id % 977)
        .bind((id * 7919) % 100_000)
        .execute(conn)
        .await?;
    Ok(())
}

/// The one number `sql` selects from `pool`.
pub async fn fetch_i64(pool: &PgPool, sql: &str) -> Result<i64> {
    Ok(sqlx::query_scalar(sql).fetch_one(pool).await?)
}

/// The rows of `schema`'s outbox table: with the default retention, the
/// events not yet delivered.
pub async fn event_rows(pool: &PgPool, schema: &Schema) -> Result<i64> {
    let sql = format!("SELECT count(*) FROM {}.outbox_events", schema.name());
    fetch_i64(pool, &sql).await
}

/// Opens `n` connections of `pool` at once, so no measured transaction
/// pays for connecting.
pub async fn warm_up(pool: &PgPool, n: u32) -> Result<()> {
    let mut held = Vec::with_capacity(n as usize);
    for _ in 0..n {
        held.push(pool.acquire().await?);
    }
    Ok(())
}

/// Runs the scenario `args` asks for, printing its figures (and with
/// `--json` one JSON object of them as the last line).
pub async fn run(ctx: &Ctx, args: BenchArgs) -> Result<ExitCode> {
    let fsync = !args.no_fsync;
    let scenario = async {
        match args.scenario {
            Scenario::Drain(a) if a.mode == Some(outbox::DeliveryMode::Wal) => {
                drain_wal::run(ctx, fsync, a).await
            }
            Scenario::Drain(a) => drain::run(ctx, fsync, a).await,
            Scenario::Latency(a) => latency::run(ctx, fsync, a).await,
            Scenario::Produce(a) => produce::run(ctx, fsync, a).await,
            Scenario::HeldSnapshot(a) => held_snapshot::run(ctx, fsync, a).await,
            Scenario::E2e(a) => e2e::run(ctx, fsync, a).await,
            Scenario::Console(a) => console::run(ctx, fsync, a).await,
            Scenario::Sources(a) => sources::run(ctx, fsync, a).await,
        }
    };
    // Ctrl-C drops the scenario, and with it the throwaway server and any
    // child relay, before the program exits.
    let report = tokio::select! {
        report = scenario => report?,
        _ = tokio::signal::ctrl_c() => anyhow::bail!("interrupted"),
    };
    if args.json {
        println!("{}", serde_json::to_string(&report)?);
    }
    Ok(ExitCode::SUCCESS)
}
