//! `outbox cleanup`: deletes processed events (retention mode) and,
//! optionally, old inbox marks, in small batches. See docs/dead-letters.md.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::Result;
use outbox::{format_age, Cleanup, CleanupParams, CleanupTarget};
use sqlx::PgConnection;

use crate::ctx::Ctx;
use crate::db;
use outbox::parse_age;

#[derive(Debug, clap::Args)]
pub struct CleanupArgs {
    /// Delete events processed longer ago than this (30s, 15m, 2h, 7d).
    /// Pending and dead-lettered events are never deleted.
    #[arg(long, value_name = "AGE", value_parser = parse_age, default_value = "7d")]
    pub older_than: Duration,
    /// Also delete inbox marks (processed_events) older than this. Left out,
    /// the inbox is not touched. Keep marks longer than any redelivery can
    /// come.
    #[arg(long, value_name = "AGE", value_parser = parse_age)]
    pub inbox_older_than: Option<Duration>,
    /// Rows deleted per statement (each batch commits on its own).
    #[arg(long, default_value_t = outbox::DEFAULT_CLEANUP_BATCH_SIZE)]
    pub batch_size: u32,
    /// Count what would be deleted, delete nothing.
    #[arg(long)]
    pub dry_run: bool,
}

/// Seconds between progress lines of a long run.
const PROGRESS_EVERY: Duration = Duration::from_secs(2);

pub async fn run(ctx: &Ctx, args: CleanupArgs) -> Result<ExitCode> {
    let schema = &ctx.schema;
    let mut jobs = vec![(CleanupTarget::Events, args.older_than)];
    if let Some(age) = args.inbox_older_than {
        jobs.push((CleanupTarget::Inbox, age));
    }
    for (_, older_than) in &jobs {
        CleanupParams {
            older_than: *older_than,
            batch_size: args.batch_size,
        }
        .validate()?;
    }
    let url = db::require_url(ctx.database_url())?;
    let pool = db::connect(&url, 1).await?;
    let mut conn = pool.acquire().await?;
    outbox::ensure_migrated(&mut conn, schema).await?;
    for (target, older_than) in jobs {
        let cleanup = Cleanup::new(schema, target);
        let table = format!("{}.{}", schema.name(), target.table());
        let cutoff = cleanup.cutoff(&mut conn, older_than).await?;
        let when = format!(
            "older than {}, before {}",
            format_age(older_than),
            cutoff.format("%Y-%m-%d %H:%M:%SZ")
        );
        if args.dry_run {
            let n = cleanup.count(&mut conn, cutoff).await?;
            println!("{table}: would delete {n} rows ({when})");
            continue;
        }
        let n = delete_all(&cleanup, &mut conn, cutoff, args.batch_size, &table).await?;
        println!("{table}: deleted {n} rows ({when})");
    }
    if args.inbox_older_than.is_none() {
        println!(
            "{}.processed_events: not touched (pass --inbox-older-than to clean the inbox)",
            schema.name()
        );
    }
    if args.dry_run {
        println!("dry run: nothing deleted");
    }
    Ok(ExitCode::SUCCESS)
}

/// Deletes batch by batch, printing progress to stderr every few seconds.
async fn delete_all(
    cleanup: &Cleanup,
    conn: &mut PgConnection,
    cutoff: chrono::DateTime<chrono::Utc>,
    batch_size: u32,
    table: &str,
) -> Result<u64> {
    let started = Instant::now();
    let mut last_report = started;
    let mut total = 0;
    loop {
        let n = cleanup.delete_batch(conn, cutoff, batch_size).await?;
        total += n;
        if n < u64::from(batch_size) {
            return Ok(total);
        }
        if last_report.elapsed() >= PROGRESS_EVERY {
            last_report = Instant::now();
            let secs = started.elapsed().as_secs_f64();
            eprintln!(
                "{table}: {total} rows deleted so far ({:.0} rows/s)",
                total as f64 / secs
            );
        }
    }
}
