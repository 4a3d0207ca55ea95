//! `outbox status`: one schema's counters and partition owners, or with
//! `[[source]]` entries a row per source (`--source NAME` for one).

use std::collections::{BTreeMap, BTreeSet};
use std::process::ExitCode;

use anyhow::Result;
use outbox::Status;

use crate::commands::targets::{one_line, Pools, Target};
use crate::ctx::Ctx;
use crate::db;

/// Flags of `outbox status`.
#[derive(Debug, clap::Args)]
pub struct StatusArgs {
    /// Print one JSON object (with [[source]] entries: a JSON array, one
    /// object per source).
    #[arg(long)]
    pub json: bool,
    /// Only this source: a [[source]] name, or NAME/SCHEMA for a schema
    /// its pattern found (default: every source).
    #[arg(long, value_name = "NAME")]
    pub source: Option<String>,
}

pub async fn run(ctx: &Ctx, args: StatusArgs) -> Result<ExitCode> {
    if ctx.has_sources() {
        return run_sources(ctx, args).await;
    }
    ctx.refuse_source_without_sources(args.source.as_deref())?;
    let url = db::require_url(ctx.database_url())?;
    let pool = db::connect(&url, 1).await?;
    let mut conn = pool.acquire().await?;
    let status = Status::read(&mut conn, &ctx.schema).await?;
    if args.json {
        println!("{}", serde_json::to_string(&status)?);
        return Ok(ExitCode::SUCCESS);
    }
    println!("schema:         {}", status.schema);
    println!("pending:        {}", status.pending);
    println!("  retrying:     {}", status.retrying);
    println!("oldest pending: {}", oldest(&status));
    println!(
        "  claimable:    {} (the oldest event the relay could claim now has waited this long)",
        if status.oldest_claimable_age_seconds > 0.0 {
            format!("{:.1} s", status.oldest_claimable_age_seconds)
        } else {
            "-".to_owned()
        }
    );
    println!("paused:         {}", paused(&status));
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
    println!("delivery:       {}", status.mode);
    if let Some(slot) = &status.slot {
        println!("slot:           {}", outbox_console::slot_line(slot));
    }
    Ok(ExitCode::SUCCESS)
}

/// What is paused, in words.
fn paused(status: &Status) -> String {
    if status.paused.iter().any(Option::is_none) {
        return "everything (the whole outbox)".to_owned();
    }
    if status.paused.is_empty() {
        return "nothing".to_owned();
    }
    let types: Vec<String> = status
        .paused
        .iter()
        .flatten()
        .map(|t| crate::text::cut(t))
        .collect();
    format!("aggregate type {}", types.join(", "))
}

fn oldest(status: &Status) -> String {
    status
        .oldest_pending_age_seconds
        .map(|s| format!("{s:.1} s"))
        .unwrap_or_else(|| "-".into())
}

/// The status of `target`.
async fn read(target: &Target, pools: &mut Pools) -> Result<Status> {
    let pool = pools.get(&target.url).await?;
    let mut conn = pool.acquire().await?;
    Ok(Status::read(&mut conn, &target.schema).await?)
}

/// A row per source, source name first; a source that cannot be read shows
/// its error on its row, the others still print, and the exit code is 1.
async fn run_sources(ctx: &Ctx, args: StatusArgs) -> Result<ExitCode> {
    let mut pools = Pools::default();
    let targets = ctx.targets(args.source.as_deref(), &mut pools).await?;
    let mut rows: Vec<(String, Result<Status, String>)> = Vec::new();
    for t in targets {
        match t {
            Ok(t) => {
                let status = read(&t, &mut pools).await.map_err(|e| one_line(&e));
                rows.push((t.source.unwrap_or_default(), status));
            }
            Err(u) => rows.push((u.source, Err(u.error))),
        }
    }
    let failed = rows.iter().any(|(_, s)| s.is_err());
    if args.json {
        let items: Vec<serde_json::Value> = rows
            .iter()
            .map(|(source, s)| {
                let mut item = serde_json::Map::new();
                item.insert("source".into(), source.clone().into());
                match s {
                    Ok(status) => {
                        if let Ok(serde_json::Value::Object(fields)) = serde_json::to_value(status)
                        {
                            item.extend(fields);
                        }
                    }
                    Err(e) => {
                        item.insert("error".into(), e.clone().into());
                    }
                }
                serde_json::Value::Object(item)
            })
            .collect();
        println!("{}", serde_json::to_string(&items)?);
    } else {
        print_rows(&rows);
    }
    if rows.is_empty() {
        eprintln!("no source: no schema matches the [[source]] patterns yet");
    }
    Ok(if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

/// The sources as an aligned table; a row that could not be read holds
/// `error: …` after the source name.
fn print_rows(rows: &[(String, Result<Status, String>)]) {
    const HEADER: [&str; 8] = [
        "SOURCE",
        "SCHEMA",
        "PENDING",
        "RETRYING",
        "OLDEST PENDING",
        "DEAD LETTERS",
        "PARTITIONS",
        "OWNERS",
    ];
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|(source, s)| match s {
            Ok(s) => {
                let owners: BTreeSet<&str> = s
                    .partitions
                    .iter()
                    .filter(|p| p.lease_ms_left.is_some_and(|ms| ms > 0))
                    .filter_map(|p| p.owner.as_deref())
                    .collect();
                vec![
                    source.clone(),
                    s.schema.clone(),
                    s.pending.to_string(),
                    s.retrying.to_string(),
                    oldest(s),
                    s.dead_letters.to_string(),
                    s.partitions.len().to_string(),
                    owners.into_iter().collect::<Vec<_>>().join(","),
                ]
            }
            Err(e) => vec![source.clone(), format!("error: {e}")],
        })
        .collect();
    let mut widths = HEADER.map(|h| h.chars().count());
    for row in cells.iter().filter(|r| r.len() == HEADER.len()) {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    widths[0] = cells
        .iter()
        .map(|r| r[0].chars().count())
        .fold(widths[0], usize::max);
    let line = |row: &[String]| {
        let mut out = String::new();
        for (i, cell) in row.iter().enumerate() {
            if i + 1 == row.len() {
                out.push_str(cell);
            } else {
                out.push_str(&format!("{cell:<w$}  ", w = widths[i]));
            }
        }
        println!("{}", out.trim_end());
    };
    line(&HEADER.map(str::to_owned));
    for row in &cells {
        line(row);
    }
}
