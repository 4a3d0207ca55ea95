//! `outbox bench`: the project measured against a reference on the same
//! server in the same run, so results are ratios that hold on a noisy
//! machine.

mod drain;
mod latency;
mod produce;
mod stats;

use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::{Args, Subcommand};
use outbox::Schema;
use outbox_embedded_pg::{PgCluster, PgOptions};
use sqlx::PgPool;

use crate::commands::Ctx;
use crate::db;

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
    /// Commit-to-acknowledgement latency under an open-loop producer.
    Latency(latency::LatencyArgs),
    /// Producer throughput: `enqueue` + wake-up against a plain INSERT and
    /// against the seed's NOTIFY trigger.
    Produce(produce::ProduceArgs),
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
}

/// Drops and re-creates `schema` and migrates it.
pub async fn fresh_schema(pool: &PgPool, name: &str, trigger: bool) -> Result<Schema> {
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
            // The reference runs compare against a table with no trigger at
            // all, or with the seed's per-row trigger.
            wakeup: Some(if trigger {
                outbox::WakeupTrigger::EveryInsert
            } else {
                outbox::WakeupTrigger::Off
            }),
        },
    )
    .await?;
    Ok(schema)
}

pub async fn run(ctx: &Ctx, args: BenchArgs) -> Result<ExitCode> {
    let fsync = !args.no_fsync;
    let report = match args.scenario {
        Scenario::Drain(a) => drain::run(ctx, fsync, a).await?,
        Scenario::Latency(a) => latency::run(ctx, fsync, a).await?,
        Scenario::Produce(a) => produce::run(ctx, fsync, a).await?,
    };
    if args.json {
        println!("{}", serde_json::to_string(&report)?);
    }
    Ok(ExitCode::SUCCESS)
}
