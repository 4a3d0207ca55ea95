//! Fairness between sources: one source receives a steady `--rate` of
//! plain-SQL inserts for `--seconds`, first with the other source idle,
//! then while the other drains a backlog of `--backlog` events; the steady
//! source's commit-to-delivery p99 with the backlog against without it.
//! With the backlog, only the events committed before its last event was
//! delivered count: a backlog drained early leaves fewer samples, not a
//! flattering p99.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use outbox::Schema;
use sqlx::PgPool;
use uuid::Uuid;

use super::super::child_relay::{ChildRelay, Lines};
use super::super::drain::preload;
use super::super::latency::open_loop;
use super::super::stats::{ms, quantile};
use super::child::{self, Configs, Entry};
use super::SourcesArgs;

/// How long the steady source's events may take to arrive once the
/// schedule ended.
const DELIVERY_DEADLINE: Duration = Duration::from_secs(120);

/// One steady run.
pub struct Steady {
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
    /// The events these figures are over: all of the schedule alone, those
    /// committed while the backlog lasted beside it.
    pub samples: usize,
    /// Seconds from the schedule's start to the backlog's last delivery
    /// (beside a backlog only).
    pub backlog_lasted_secs: Option<f64>,
    /// Events of the backlog still pending when the schedule ended.
    pub backlog_left: i64,
    /// Achieved rate of the schedule.
    pub achieved: f64,
}

/// What the fairness phase measured.
pub struct Fairness {
    pub alone: Steady,
    pub with_backlog: Steady,
}

impl Fairness {
    /// The steady source's p99 with the backlog against without it.
    pub fn ratio(&self) -> f64 {
        self.with_backlog.p99_ms / self.alone.p99_ms.max(1e-6)
    }
}

/// One steady run: `--rate` into `steady` for `--seconds` under a relay
/// serving both sources, `backlog` idle or (`with_backlog`) draining a
/// backlog from before the schedule's start.
async fn steady_run(
    url: &str,
    pool: &PgPool,
    configs: &Configs,
    backlog: &Schema,
    steady: &Schema,
    args: &SourcesArgs,
    with_backlog: bool,
) -> Result<Steady> {
    prepare_backlog(pool, backlog, args, with_backlog).await?;
    let mut relay = spawn_relay(url, configs, backlog, steady, args, with_backlog)?;
    let lines = relay.lines().expect("timed output").clone();
    let names = [backlog.name().to_owned(), steady.name().to_owned()];
    if with_backlog {
        // The backlog is being drained when the schedule starts.
        first_delivery(&mut relay, &lines).await?;
    } else {
        child::wait_dormant(&mut relay, pool, &names, Duration::from_secs(120)).await?;
    }
    let total = u64::from(args.rate) * args.seconds;
    let (committed, produce_secs, backlog_left) =
        produce_steady(url, pool, steady, args, &names[..1], with_backlog).await?;
    let seen_at = delivered(&mut relay, &lines, &committed).await?;
    let backlog_end = with_backlog.then(|| backlog_last_delivery(&lines, &committed));
    let status = relay.stop().await?;
    if !status.success() {
        eprintln!("bench sources: the relay ended with {status}");
    }
    let schedule_start = committed.first().map(|(_, at)| *at);
    let (samples, backlog_lasted_secs) = counted(&seen_at, backlog_end, schedule_start);
    Ok(Steady {
        p50_ms: ms(quantile(&samples, 0.5)),
        p99_ms: ms(quantile(&samples, 0.99)),
        max_ms: ms(samples.last().copied().unwrap_or_default()),
        samples: samples.len(),
        backlog_lasted_secs,
        backlog_left,
        achieved: total as f64 / produce_secs,
    })
}

/// Empties `backlog`, then (`with_backlog`) preloads `--backlog` events
/// into it.
async fn prepare_backlog(
    pool: &PgPool,
    backlog: &Schema,
    args: &SourcesArgs,
    with_backlog: bool,
) -> Result<()> {
    sqlx::raw_sql(&format!("TRUNCATE {}.outbox_events", backlog.name()))
        .execute(pool)
        .await?;
    if with_backlog {
        eprintln!(
            "bench sources: preloading a backlog of {} events into {}",
            args.backlog,
            backlog.name()
        );
        preload(pool, backlog, args.backlog, 10_000).await?;
    }
    Ok(())
}

/// `outbox relay` over both sources, its lines timed.
fn spawn_relay(
    url: &str,
    configs: &Configs,
    backlog: &Schema,
    steady: &Schema,
    args: &SourcesArgs,
    with_backlog: bool,
) -> Result<ChildRelay> {
    let text = child::config_text(
        url,
        args.pool_size,
        &[
            Entry::schema("backlog", backlog.name()),
            Entry::schema("steady", steady.name()),
        ],
    )?;
    let instance = if with_backlog {
        "bench-sources-fair-backlog"
    } else {
        "bench-sources-fair-alone"
    };
    configs.spawn(instance, &text)
}

/// Waits (up to 120 s) for the relay's first delivery.
async fn first_delivery(relay: &mut ChildRelay, lines: &Lines) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(120);
    while lines.distinct.load(Ordering::Relaxed) == 0 {
        relay.check_running()?;
        if Instant::now() > deadline {
            bail!("the relay delivered nothing of the backlog within 120 s");
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    Ok(())
}

/// The schedule into `steady` on connections of its own: each event and
/// when its commit returned, the schedule's length (s), and the events
/// still pending in `backlog` when it ended.
async fn produce_steady(
    url: &str,
    pool: &PgPool,
    steady: &Schema,
    args: &SourcesArgs,
    backlog: &[String],
    with_backlog: bool,
) -> Result<(Vec<(Uuid, Instant)>, f64, i64)> {
    eprintln!(
        "bench sources: {} /s into {} for {} s, {}",
        args.rate,
        steady.name(),
        args.seconds,
        if with_backlog {
            "another source draining its backlog"
        } else {
            "the other source idle"
        }
    );
    let total = u64::from(args.rate) * args.seconds;
    let insert: Arc<str> = format!(
        "INSERT INTO {}.outbox_events (aggregate_type, aggregate_id, event_type, payload)
         VALUES ('order', $1, 'order.created', '{{}}') RETURNING id",
        steady.name()
    )
    .into();
    let producers = sqlx::postgres::PgPoolOptions::new()
        .max_connections(8)
        .min_connections(8)
        .connect(url)
        .await?;
    super::super::warm_up(&producers, 8).await?;
    let (committed, _late, _late_begins, produce_secs) = open_loop(args.rate, total, |i| {
        let (pool, insert) = (producers.clone(), insert.clone());
        async move {
            let began = Instant::now();
            let id: Uuid = sqlx::query_scalar(&insert)
                .bind(format!("steady-{}", i % 100))
                .fetch_one(&pool)
                .await?;
            Ok((id, Instant::now(), began))
        }
    })
    .await?;
    let backlog_left = child::pending(pool, backlog).await?;
    producers.close().await;
    Ok((committed, produce_secs, backlog_left))
}

/// Waits (up to [`DELIVERY_DEADLINE`]) until every committed event is
/// delivered: each one's commit and its latency.
async fn delivered(
    relay: &mut ChildRelay,
    lines: &Lines,
    committed: &[(Uuid, Instant)],
) -> Result<Vec<(Instant, Duration)>> {
    let deadline = Instant::now() + DELIVERY_DEADLINE;
    let mut seen_at = Vec::with_capacity(committed.len());
    for (id, at) in committed {
        let seen = loop {
            if let Some(seen) = lines.first_seen.lock().expect("lock").get(id) {
                break *seen;
            }
            if Instant::now() > deadline {
                bail!(
                    "the steady source's events were not all delivered within {} s of the schedule's end",
                    DELIVERY_DEADLINE.as_secs()
                );
            }
            relay.check_running()?;
            tokio::time::sleep(Duration::from_millis(2)).await;
        };
        seen_at.push((*at, seen.saturating_duration_since(*at)));
    }
    Ok(seen_at)
}

/// The backlog's last delivery: the latest line that is not the steady
/// source's (`None` if there is none).
fn backlog_last_delivery(lines: &Lines, committed: &[(Uuid, Instant)]) -> Option<Instant> {
    let steady: std::collections::HashSet<&Uuid> = committed.iter().map(|(id, _)| id).collect();
    let seen = lines.first_seen.lock().expect("lock");
    seen.iter()
        .filter(|(id, _)| !steady.contains(id))
        .map(|(_, at)| *at)
        .max()
}

/// The latencies the figures are over, sorted, and how long the backlog
/// lasted from the schedule's start: all of them alone (`backlog_end`
/// `None`); beside a backlog, those committed before its last delivery
/// (now, if none was seen).
fn counted(
    seen_at: &[(Instant, Duration)],
    backlog_end: Option<Option<Instant>>,
    schedule_start: Option<Instant>,
) -> (Vec<Duration>, Option<f64>) {
    let (mut samples, backlog_lasted_secs): (Vec<Duration>, _) = match backlog_end {
        Some(end) => {
            let end = end.unwrap_or_else(Instant::now);
            let lasted =
                schedule_start.map_or(0.0, |s| end.saturating_duration_since(s).as_secs_f64());
            let during = seen_at
                .iter()
                .filter(|(at, _)| *at < end)
                .map(|(_, d)| *d)
                .collect();
            (during, Some(lasted))
        }
        None => (seen_at.iter().map(|(_, d)| *d).collect(), None),
    };
    samples.sort();
    (samples, backlog_lasted_secs)
}

pub async fn run(
    url: &str,
    pool: &PgPool,
    configs: &Configs,
    backlog: &Schema,
    steady: &Schema,
    args: &SourcesArgs,
) -> Result<Fairness> {
    let alone = steady_run(url, pool, configs, backlog, steady, args, false).await?;
    let with_backlog = steady_run(url, pool, configs, backlog, steady, args, true).await?;
    Ok(Fairness {
        alone,
        with_backlog,
    })
}
