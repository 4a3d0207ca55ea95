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
    /// The delivery mode: `table` (the default for a new schema: events
    /// are rows, claimed and deleted by the relay; no server setting
    /// needed) or `wal` (events are transactional logical messages written
    /// by `outbox_emit`, streamed from a replication slot: needs
    /// `wal_level = logical`, a free slot and WAL sender, and a role with
    /// REPLICATION; refused, with nothing changed, otherwise). Left out, the
    /// schema keeps its mode.
    #[arg(long, value_name = "MODE")]
    pub mode: Option<outbox::DeliveryMode>,
    /// The WAL mode's replication slot and publication (default
    /// `outbox_<schema>`); read with `--mode wal`.
    #[arg(long, value_name = "NAME", requires = "mode")]
    pub slot: Option<String>,
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
            mode: args.mode,
            slot: args.slot,
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
        "partitions: {}, wake-up trigger: {}, delivery: {}",
        report.partitions,
        report.wakeup.name(),
        report.mode.name()
    );
    match (report.mode, &report.slot) {
        (outbox::DeliveryMode::Wal, Some(slot)) => println!(
            "replication slot {slot}{}: call {}.outbox_emit(...) in your transactions (a plain INSERT INTO outbox_events is captured too)",
            if report.slot_created { " (created)" } else { "" },
            schema.name()
        ),
        (outbox::DeliveryMode::Table, Some(slot)) => println!(
            "replication slot {slot} is kept, with the events emitted before the switch: drop it with SELECT pg_drop_replication_slot('{slot}') once they are read (it holds WAL until then)"
        ),
        _ => {}
    }
    Ok(ExitCode::SUCCESS)
}
