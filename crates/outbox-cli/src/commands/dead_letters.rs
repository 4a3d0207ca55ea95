//! `outbox dead-letters list|retry|discard`: inspect dead-lettered events,
//! put them back in the queue, or delete them. See docs/dead-letters.md.

use std::process::ExitCode;
use std::time::Duration;

use anyhow::{bail, Result};
use outbox::{DeadLetter, DeadLetters, Selector, DEFAULT_LIST_LIMIT};
use sqlx::pool::PoolConnection;
use sqlx::Postgres;
use uuid::Uuid;

use crate::commands::Ctx;
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
    #[arg(long, value_name = "AGE", value_parser = parse_age)]
    pub older_than: Option<Duration>,
    /// Only those dead-lettered less than this long ago (30s, 15m, 2h, 7d).
    #[arg(long, value_name = "AGE", value_parser = parse_age)]
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
    /// Print one JSON array of dead letters (with payloads and headers).
    #[arg(long)]
    pub json: bool,
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
}

/// Rows shown by a dry run.
const PREVIEW_ROWS: u32 = 100;
/// Characters of `last_error` shown in the table.
const ERROR_CHARS: usize = 60;

pub async fn run(ctx: &Ctx, cmd: DeadLettersCommand) -> Result<ExitCode> {
    let schema = &ctx.schema;
    let url = db::require_url(ctx.database_url())?;
    let pool = db::connect(&url, 1).await?;
    let mut conn = pool.acquire().await?;
    outbox::ensure_migrated(&mut conn, schema).await?;
    let dead = DeadLetters::new(schema);
    match cmd {
        DeadLettersCommand::List(args) => list(&dead, &mut conn, args).await?,
        DeadLettersCommand::Retry(args) => act(&dead, &mut conn, Action::Retry, args).await?,
        DeadLettersCommand::Discard(args) => act(&dead, &mut conn, Action::Discard, args).await?,
    }
    Ok(ExitCode::SUCCESS)
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
    print_table(&page.items);
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
        println!("would {verb} {} ({selector})", plural(preview.total));
        if !preview.items.is_empty() {
            print_table(&preview.items);
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
    println!("{done} {} ({selector})", plural(n));
    Ok(())
}

fn plural(n: u64) -> String {
    if n == 1 {
        "1 dead letter".to_owned()
    } else {
        format!("{n} dead letters")
    }
}

/// Prints dead letters as an aligned table; nothing when there are none.
fn print_table(items: &[DeadLetter]) {
    if items.is_empty() {
        return;
    }
    let header = [
        "ID",
        "SEQ",
        "AGGREGATE",
        "EVENT TYPE",
        "ATTEMPTS",
        "DEAD-LETTERED AT",
        "LAST ERROR",
    ];
    let rows: Vec<[String; 7]> = items
        .iter()
        .map(|d| {
            [
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
    let line = |cells: &[&str]| {
        let mut out = String::new();
        for (i, cell) in cells.iter().enumerate() {
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

/// The oldest age a command takes: 100 years. PostgreSQL cannot go back
/// much further from today (timestamps start in 4713 BC), and would say so
/// only after the query started, in words that name no flag.
const MAX_AGE_DAYS: u64 = 36_500;

/// Parses an age such as `30s`, `15m`, `2h`, `7d`, `1w` or `1h30m`, at most
/// [`MAX_AGE_DAYS`] days.
pub(crate) fn parse_age(text: &str) -> Result<Duration, String> {
    let hint = "use a number and a unit: s, m, h, d or w (e.g. 30s, 15m, 2h, 7d, 1h30m)";
    let text = text.trim();
    if text.is_empty() {
        return Err(format!("empty age: {hint}"));
    }
    let mut total: u64 = 0;
    let mut rest = text;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        if digits == 0 {
            return Err(format!("{text:?} is not an age: {hint}"));
        }
        let n: u64 = rest[..digits]
            .parse()
            .map_err(|_| format!("{text:?} is too large: {hint}"))?;
        rest = &rest[digits..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit())
            .unwrap_or(rest.len());
        let secs = match &rest[..unit_len] {
            "s" => 1,
            "m" => 60,
            "h" => 3_600,
            "d" => 86_400,
            "w" => 604_800,
            "" => return Err(format!("{text:?} has no unit: {hint}")),
            unit => return Err(format!("unknown unit {unit:?} in {text:?}: {hint}")),
        };
        rest = &rest[unit_len..];
        total = n
            .checked_mul(secs)
            .and_then(|s| total.checked_add(s))
            .ok_or_else(|| format!("{text:?} is too large: {hint}"))?;
    }
    if total > MAX_AGE_DAYS * 86_400 {
        return Err(format!(
            "{text:?} is out of range: use 0s to {MAX_AGE_DAYS}d (100 years); {hint}"
        ));
    }
    Ok(Duration::from_secs(total))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_parse_and_bad_ones_say_how_to_write_them() {
        let secs = |s: &str| parse_age(s).unwrap().as_secs();
        assert_eq!(secs("30s"), 30);
        assert_eq!(secs("15m"), 900);
        assert_eq!(secs("2h"), 7_200);
        assert_eq!(secs("7d"), 604_800);
        assert_eq!(secs("1h30m"), 5_400);
        assert_eq!(secs("1w"), 604_800);
        assert_eq!(secs("36500d"), 36_500 * 86_400);
        let err = parse_age("36501d").unwrap_err();
        assert!(err.contains("0s to 36500d"), "{err}");
        for bad in [
            "",
            "7",
            "d",
            "7x",
            "7 d",
            "-1d",
            "100000000d",
            "99999999999999999999d",
        ] {
            let err = parse_age(bad).unwrap_err();
            assert!(err.contains("e.g. 30s"), "{bad:?}: {err}");
        }
    }

    #[test]
    fn errors_are_cut_to_one_short_line() {
        assert_eq!(outbox::redact::fit("a\nb", 10), "a b");
        assert_eq!(outbox::redact::fit("abcdef", 4), "abc…");
    }
}
