//! `outbox migrate`.

use std::process::ExitCode;

use anyhow::Result;
use outbox::MigrateOptions;

use crate::ctx::Ctx;
use crate::db;

/// Flags of `outbox migrate`.
#[derive(Debug, clap::Args)]
pub struct MigrateArgs {
    /// Ownership partitions for a new schema (fixed once created).
    #[arg(long)]
    pub partitions: Option<u32>,
    /// How rows inserted by plain SQL wake relays in other processes:
    /// `idle` (default for a new schema) sends one NOTIFY per inserting
    /// statement, only while a relay has said it is idle, so busy relays
    /// cost producers nothing; `every-insert` is the seed's per-row trigger
    /// (a NOTIFY per row: every commit takes PostgreSQL's global notify
    /// lock, about a third less producer throughput at 8 producers); `off`
    /// leaves relays to their poll (at most `poll_max_ms` late). Left out,
    /// an existing schema keeps its mode.
    #[arg(long, value_name = "MODE", value_parser = parse_wakeup_trigger)]
    pub wakeup_trigger: Option<outbox::WakeupTrigger>,
    /// Older switch: `true` is `--wakeup-trigger every-insert`, `false` is
    /// `--wakeup-trigger idle`.
    #[arg(long, conflicts_with = "wakeup_trigger")]
    pub notify_trigger: Option<bool>,
}

/// `--wakeup-trigger`: idle, every-insert or off.
pub fn parse_wakeup_trigger(s: &str) -> Result<outbox::WakeupTrigger, String> {
    use outbox::WakeupTrigger as W;
    [W::Idle, W::EveryInsert, W::Off]
        .into_iter()
        .find(|m| m.name() == s)
        .ok_or_else(|| format!("{s:?} is not a wake-up mode: use idle, every-insert or off"))
}

pub async fn run(ctx: &Ctx, args: MigrateArgs) -> Result<ExitCode> {
    let schema = &ctx.schema;
    let url = db::require_url(ctx.database_url())?;
    let pool = db::connect(&url, 1).await?;
    let mut conn = pool.acquire().await?;
    let report = outbox::migrate(
        &mut conn,
        schema,
        &MigrateOptions {
            partitions: args.partitions,
            notify_trigger: args.notify_trigger,
            wakeup: args.wakeup_trigger,
        },
    )
    .await?;
    if report.applied.is_empty() {
        println!("schema {} is up to date", schema.name());
    } else {
        println!(
            "applied {} to schema {}",
            report.applied.join(", "),
            schema.name()
        );
    }
    println!(
        "partitions: {}, wake-up trigger: {}",
        report.partitions,
        report.wakeup.name()
    );
    Ok(ExitCode::SUCCESS)
}
