//! `outbox dead-letters list|retry|discard`: inspect dead-lettered events,
//! put them back in the queue, or delete them. See docs/dead-letters.md.
//! With `[[source]]` entries, `list` covers every source (or the one
//! `--source` names) with a source column, and `retry`/`discard` change
//! one source: `--source` is required when there are several.
//!
//! Long (past 400 lines) for the age parser and its tests beside the
//! commands that take ages; the commands over many sources share the
//! table and the actions, so they stay here too.

use std::process::ExitCode;
use std::time::Duration;

use anyhow::{bail, Result};
use outbox::{DeadLetter, DeadLetters, Selector, DEFAULT_LIST_LIMIT};
use sqlx::pool::PoolConnection;
use sqlx::Postgres;
use uuid::Uuid;

use crate::commands::targets::{Pools, Target};
use crate::ctx::Ctx;
use crate::db;

#[derive(Debug, clap::Subcommand)]
pub enum DeadLettersCommand {
    /// List dead-lettered events in their original (seq) order.
    List(ListArgs),
    /// Put dead letters back in the queue: they keep their place (seq) and
    /// start again from zero attempts.
    Retry(ActionArgs),
    /// Delete dead letters for good.
    Discard(ActionArgs),
}

/// Criteria shared by every subcommand; they combine with AND.
#[derive(Debug, Clone, clap::Args)]
pub struct Criteria {
    /// Only this event id (repeatable).
    #[arg(long = "id", value_name = "UUID")]
    pub ids: Vec<Uuid>,
    /// Only this aggregate type.
    #[arg(long, value_name = "TYPE")]
    pub aggregate_type: Option<String>,
    /// Only this aggregate id.
    #[arg(long, value_name = "ID")]
    pub aggregate_id: Option<String>,
    /// Only this event type.
    #[arg(long, value_name = "TYPE")]
    pub event_type: Option<String>,
    /// Only those dead-lettered at least this long ago (30s, 15m, 2h, 7d).
    #[arg(long, value_name = "AGE", value_parser = outbox::parse_age)]
    pub older_than: Option<Duration>,
    /// Only those dead-lettered less than this long ago (30s, 15m, 2h, 7d).
    #[arg(long, value_name = "AGE", value_parser = outbox::parse_age)]
    pub newer_than: Option<Duration>,
}

impl Criteria {
    /// The library's selector for these criteria.
    fn into_selector(self, all: bool) -> Selector {
        Selector {
            ids: self.ids,
            aggregate_type: self.aggregate_type,
            aggregate_id: self.aggregate_id,
            event_type: self.event_type,
            older_than: self.older_than,
            newer_than: self.newer_than,
            all,
        }
    }
}

#[derive(Debug, clap::Args)]
pub struct ListArgs {
    #[command(flatten)]
    pub criteria: Criteria,
    /// Most dead letters shown.
    #[arg(long, default_value_t = DEFAULT_LIST_LIMIT)]
    pub limit: u32,
    /// Print one JSON array of dead letters (with payloads and headers;
    /// with [[source]] entries each carries its `source`).
    #[arg(long)]
    pub json: bool,
    /// Only this source: a [[source]] name, or NAME/SCHEMA for a schema
    /// its pattern found (default: every source).
    #[arg(long, value_name = "NAME")]
    pub source: Option<String>,
}

#[derive(Debug, clap::Args)]
pub struct ActionArgs {
    #[command(flatten)]
    pub criteria: Criteria,
    /// Every dead letter (the age bounds still apply).
    #[arg(long, conflicts_with_all = ["ids", "aggregate_type", "aggregate_id", "event_type"])]
    pub all: bool,
    /// Show what would change, change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// The source to change: a [[source]] name, or NAME/SCHEMA for a
    /// schema its pattern found (required when there are several).
    #[arg(long, value_name = "NAME")]
    pub source: Option<String>,
}

/// Rows shown by a dry run.
const PREVIEW_ROWS: u32 = 100;
/// Characters of `last_error` shown in the table.
const ERROR_CHARS: usize = 60;

pub async fn run(ctx: &Ctx, cmd: DeadLettersCommand) -> Result<ExitCode> {
    if ctx.has_sources() {
        return run_sources(ctx, cmd).await;
    }
    let source = match &cmd {
        DeadLettersCommand::List(args) => args.source.as_deref(),
        DeadLettersCommand::Retry(args) | DeadLettersCommand::Discard(args) => {
            args.source.as_deref()
        }
    };
    ctx.refuse_source_without_sources(source)?;
    let schema = &ctx.schema;
    let url = db::require_url(ctx.database_url())?;
    let pool = db::connect(&url, 1).await?;
    let mut conn = pool.acquire().await?;
    outbox::ensure_migrated(&mut conn, schema).await?;
    let dead = DeadLetters::new(schema);
    match cmd {
        DeadLettersCommand::List(args) => list(&dead, &mut conn, args).await?,
        DeadLettersCommand::Retry(args) => act(&dead, &mut conn, Action::Retry, args, None).await?,
        DeadLettersCommand::Discard(args) => {
            act(&dead, &mut conn, Action::Discard, args, None).await?
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The commands with `[[source]]` entries.
async fn run_sources(ctx: &Ctx, cmd: DeadLettersCommand) -> Result<ExitCode> {
    let mut pools = Pools::default();
    let (action, args) = match cmd {
        DeadLettersCommand::List(args) => return list_sources(ctx, &mut pools, args).await,
        DeadLettersCommand::Retry(args) => (Action::Retry, args),
        DeadLettersCommand::Discard(args) => (Action::Discard, args),
    };
    let target = ctx
        .target_to_change(args.source.as_deref(), action.verb(), &mut pools)
        .await?;
    let mut conn = migrated(&target, &mut pools).await?;
    let dead = DeadLetters::new(&target.schema);
    let source = target.source.clone();
    act(&dead, &mut conn, action, args, source.as_deref()).await?;
    Ok(ExitCode::SUCCESS)
}

/// A connection to `target`'s database, its schema checked for the
/// outbox tables.
async fn migrated(target: &Target, pools: &mut Pools) -> Result<PoolConnection<Postgres>> {
    let pool = pools.get(&target.url).await?;
    let mut conn = pool.acquire().await?;
    outbox::ensure_migrated(&mut conn, &target.schema).await?;
    Ok(conn)
}

/// `list` over every source `--source` selects: at most `--limit` rows in
/// all, source by source in configuration order, each source's in seq
/// order. A source that cannot be read is reported on stderr, the others
/// still listed, and the exit code is 1.
async fn list_sources(ctx: &Ctx, pools: &mut Pools, args: ListArgs) -> Result<ExitCode> {
    let targets = ctx.targets(args.source.as_deref(), pools).await?;
    let filter = args.criteria.into_selector(false).to_filter(args.limit);
    let mut rows: Vec<(String, DeadLetter)> = Vec::new();
    let mut total = 0u64;
    let mut failed = false;
    for t in targets {
        let t = match t {
            Ok(t) => t,
            Err(u) => {
                eprintln!("error: source {}: {}", u.source, u.error);
                failed = true;
                continue;
            }
        };
        let source = t.source.clone().unwrap_or_default();
        let page = match migrated(&t, pools).await {
            Ok(mut conn) => DeadLetters::new(&t.schema)
                .list(&mut conn, &filter)
                .await
                .map_err(anyhow::Error::from),
            Err(e) => Err(e),
        };
        match page {
            Ok(page) => {
                total += page.total;
                rows.extend(page.items.into_iter().map(|d| (source.clone(), d)));
            }
            Err(e) => {
                eprintln!(
                    "error: source {source}: {}",
                    crate::commands::targets::one_line(&e)
                );
                failed = true;
            }
        }
    }
    rows.truncate(args.limit as usize);
    let shown = rows.len() as u64;
    let more = (shown < total)
        .then(|| format!("showing {shown} of {total} dead letters (raise --limit to see more)"));
    if args.json {
        let items: Vec<serde_json::Value> = rows
            .iter()
            .map(|(source, d)| {
                let mut item = serde_json::Map::new();
                item.insert("source".into(), source.clone().into());
                if let Ok(serde_json::Value::Object(fields)) = serde_json::to_value(d) {
                    item.extend(fields);
                }
                serde_json::Value::Object(item)
            })
            .collect();
        println!("{}", serde_json::to_string(&items)?);
        if let Some(more) = more {
            eprintln!("{more}");
        }
    } else {
        let table: Vec<(Option<&str>, &DeadLetter)> =
            rows.iter().map(|(s, d)| (Some(s.as_str()), d)).collect();
        print_table(&table);
        println!("{}", more.unwrap_or_else(|| plural(total)));
    }
    Ok(if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

async fn list(
    dead: &DeadLetters,
    conn: &mut PoolConnection<Postgres>,
    args: ListArgs,
) -> Result<()> {
    let filter = args.criteria.into_selector(false).to_filter(args.limit);
    let page = dead.list(conn, &filter).await?;
    let shown = page.items.len() as u64;
    if args.json {
        println!("{}", serde_json::to_string(&page.items)?);
        if shown < page.total {
            eprintln!(
                "showing {shown} of {} dead letters (raise --limit to see more)",
                page.total
            );
        }
        return Ok(());
    }
    print_table(&untagged(&page.items));
    if shown < page.total {
        println!(
            "showing {shown} of {} dead letters (raise --limit to see more)",
            page.total
        );
    } else {
        println!("{}", plural(page.total));
    }
    Ok(())
}

#[derive(Debug, Clone, Copy)]
enum Action {
    Retry,
    Discard,
}

impl Action {
    fn verb(self) -> &'static str {
        match self {
            Action::Retry => "retry",
            Action::Discard => "discard",
        }
    }
}

async fn act(
    dead: &DeadLetters,
    conn: &mut PoolConnection<Postgres>,
    action: Action,
    args: ActionArgs,
    source: Option<&str>,
) -> Result<()> {
    let selector = args.criteria.into_selector(args.all);
    let verb = action.verb();
    if selector.validate().is_err() {
        bail!(
            "{verb} needs a selector: pass --id UUID (repeatable), --aggregate-id ID, \
             --aggregate-type TYPE, --event-type TYPE, or --all"
        );
    }
    if args.dry_run {
        let preview = dead.list(conn, &selector.to_filter(PREVIEW_ROWS)).await?;
        println!(
            "would {verb} {}{} ({selector})",
            plural(preview.total),
            in_source(source)
        );
        if !preview.items.is_empty() {
            let rows: Vec<(Option<&str>, &DeadLetter)> =
                preview.items.iter().map(|d| (source, d)).collect();
            print_table(&rows);
            let rest = preview.total - preview.items.len() as u64;
            if rest > 0 {
                println!("… and {rest} more");
            }
        }
        println!("dry run: nothing changed");
        return Ok(());
    }
    let n = match action {
        Action::Retry => dead.retry(conn, &selector).await?,
        Action::Discard => dead.discard(conn, &selector).await?,
    };
    let done = match action {
        Action::Retry => "retried",
        Action::Discard => "discarded",
    };
    println!("{done} {}{} ({selector})", plural(n), in_source(source));
    Ok(())
}

/// ` in source NAME`, or nothing without sources.
fn in_source(source: Option<&str>) -> String {
    source.map_or_else(String::new, |s| format!(" in source {s}"))
}

/// Rows without a source.
fn untagged(items: &[DeadLetter]) -> Vec<(Option<&str>, &DeadLetter)> {
    items.iter().map(|d| (None, d)).collect()
}

fn plural(n: u64) -> String {
    if n == 1 {
        "1 dead letter".to_owned()
    } else {
        format!("{n} dead letters")
    }
}

/// Prints dead letters as an aligned table, led by a SOURCE column when
/// they carry a source; nothing when there are none.
fn print_table(items: &[(Option<&str>, &DeadLetter)]) {
    let Some((first, _)) = items.first() else {
        return;
    };
    let with_source = first.is_some();
    let header = [
        "SOURCE",
        "ID",
        "SEQ",
        "AGGREGATE",
        "EVENT TYPE",
        "ATTEMPTS",
        "DEAD-LETTERED AT",
        "LAST ERROR",
    ];
    let rows: Vec<[String; 8]> = items
        .iter()
        .map(|(source, d)| {
            [
                source.unwrap_or_default().to_owned(),
                d.id.to_string(),
                d.seq.to_string(),
                format!("{}/{}", d.aggregate_type, d.aggregate_id),
                d.event_type.clone(),
                d.attempts.to_string(),
                d.dead_lettered_at
                    .map(|at| at.format("%Y-%m-%d %H:%M:%SZ").to_string())
                    .unwrap_or_else(|| "not finite".to_owned()),
                outbox::redact::fit(d.last_error.as_deref().unwrap_or("-"), ERROR_CHARS),
            ]
        })
        .collect();
    let mut widths = header.map(|h| h.chars().count());
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let skip = usize::from(!with_source);
    let line = |cells: &[&str]| {
        let mut out = String::new();
        for (i, cell) in cells.iter().enumerate().skip(skip) {
            if i + 1 == cells.len() {
                out.push_str(cell);
            } else {
                out.push_str(&format!("{cell:<w$}  ", w = widths[i]));
            }
        }
        println!("{}", out.trim_end());
    };
    line(&header);
    for row in &rows {
        line(&row.each_ref().map(String::as_str));
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn errors_are_cut_to_one_short_line() {
        assert_eq!(outbox::redact::fit("a\nb", 10), "a b");
        assert_eq!(outbox::redact::fit("abcdef", 4), "abc…");
    }
}
