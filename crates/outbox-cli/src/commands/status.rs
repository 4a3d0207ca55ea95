//! `outbox status`.

use std::collections::BTreeMap;
use std::process::ExitCode;

use anyhow::Result;
use outbox::Status;

use crate::commands::Ctx;
use crate::db;

/// Flags of `outbox status`.
#[derive(Debug, clap::Args)]
pub struct StatusArgs {
    /// Print one JSON object.
    #[arg(long)]
    pub json: bool,
}

pub async fn run(ctx: &Ctx, args: StatusArgs) -> Result<ExitCode> {
    let schema = &ctx.schema;
    let url = db::require_url(ctx.database_url())?;
    let pool = db::connect(&url, 1).await?;
    let mut conn = pool.acquire().await?;
    let status = Status::read(&mut conn, schema).await?;
    if args.json {
        println!("{}", serde_json::to_string(&status)?);
        return Ok(ExitCode::SUCCESS);
    }
    println!("schema:         {}", status.schema);
    println!("pending:        {}", status.pending);
    println!("  retrying:     {}", status.retrying);
    println!(
        "oldest pending: {}",
        status
            .oldest_pending_age_seconds
            .map(|s| format!("{s:.1} s"))
            .unwrap_or_else(|| "-".into())
    );
    println!("dead letters:   {}", status.dead_letters);
    let mut owners: BTreeMap<String, Vec<i32>> = BTreeMap::new();
    for p in &status.partitions {
        let live = p.lease_ms_left.is_some_and(|ms| ms > 0);
        let key = match (&p.owner, live) {
            (Some(o), true) => o.clone(),
            (Some(o), false) => format!("{o} (lease expired)"),
            (None, _) => "(unowned)".into(),
        };
        owners.entry(key).or_default().push(p.partition);
    }
    println!("partitions:     {}", status.partitions.len());
    for (owner, parts) in owners {
        println!("  {owner}: {} partitions", parts.len());
    }
    Ok(ExitCode::SUCCESS)
}
