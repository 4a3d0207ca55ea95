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
    #[arg(long, value_name = "MODE")]
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
    /// The WAL mode's replication slot and publication (default: the one
    /// the schema already has, else `outbox_<schema>`, or
    /// `outbox_<database>_<schema>` when another database of the server
    /// has a slot of that name); read with `--mode wal`. A slot that the
    /// outbox did not create is refused unless `--adopt-slot` is given; a
    /// slot of another schema is refused always.
    #[arg(long, value_name = "NAME", requires = "mode")]
    pub slot: Option<String>,
    /// With `--mode wal --slot NAME`: take an existing slot that the outbox
    /// did not create. The relay reads it from its confirmed position,
    /// confirms past every message that is not this schema's, and drops it
    /// at a switch back to the table mode.
    #[arg(long, requires = "slot")]
    pub adopt_slot: bool,
    /// With `--mode table` (leaving the WAL mode): how long to wait for the
    /// transactions older than the switch to end, in seconds, saying every
    /// 5 s which are left. Past it the switch stays in progress (rows
    /// written meanwhile wait in the table) and running the same command
    /// again resumes it.
    #[arg(long, value_name = "SECS", default_value_t = outbox::DEFAULT_SWITCH_TIMEOUT.as_secs())]
    pub switch_timeout: u64,
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
            adopt_slot: args.adopt_slot,
            switch_timeout: Some(std::time::Duration::from_secs(args.switch_timeout)),
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
            "replication slot {slot} holds the events emitted before the switch: the relay reads it to the switch, then lets the rows written since go and drops the slot (it logs 'switched to the table mode'); until then those rows wait"
        ),
        _ => {}
    }
    for warning in &report.warnings {
        eprintln!("warning: {warning}");
    }
    Ok(ExitCode::SUCCESS)
}
