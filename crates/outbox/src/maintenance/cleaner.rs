//! A background task that runs the retention cleanup every few minutes,
//! beside a relay in retention mode.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use sqlx::PgPool;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::cleanup::{Cleanup, CleanupParams, CleanupTarget, MAX_CLEANUP_BATCH_SIZE};
use crate::error::{range, Error, Result};
use crate::schema::Schema;

/// Longest retention accepted, in seconds (ten years).
const MAX_RETENTION_SECS: u64 = 10 * 365 * 86_400;

/// Cleaner settings. Every duration carries its unit in its name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CleanerConfig {
    /// Processed events (retention mode) older than this many seconds are
    /// deleted. Default 604800 (7 days).
    pub events_retention_secs: u64,
    /// Inbox marks (`processed_events`) older than this many seconds are
    /// deleted; unset (the default) leaves the inbox alone. Keep it longer
    /// than any redelivery can come.
    pub inbox_retention_secs: Option<u64>,
    /// Seconds between cleanup runs; the first run starts at once.
    /// Default 300.
    pub interval_secs: u64,
    /// Rows deleted per statement (each batch is its own short
    /// transaction). Default 1000.
    pub batch_size: u32,
}

impl Default for CleanerConfig {
    fn default() -> Self {
        CleanerConfig {
            events_retention_secs: 7 * 86_400,
            inbox_retention_secs: None,
            interval_secs: 300,
            batch_size: super::cleanup::DEFAULT_CLEANUP_BATCH_SIZE,
        }
    }
}

impl CleanerConfig {
    /// Checks every field; the error names the field, the value and the
    /// allowed range.
    pub fn validate(&self) -> Result<()> {
        range(
            "events_retention_secs",
            self.events_retention_secs,
            1,
            MAX_RETENTION_SECS,
        )?;
        if let Some(secs) = self.inbox_retention_secs {
            range("inbox_retention_secs", secs, 1, MAX_RETENTION_SECS)?;
        }
        range("interval_secs", self.interval_secs, 1, 86_400)?;
        range(
            "batch_size",
            u64::from(self.batch_size),
            1,
            u64::from(MAX_CLEANUP_BATCH_SIZE),
        )?;
        Ok(())
    }
}

/// Running totals of a cleaner.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct CleanerStats {
    /// Completed runs (each cleans every configured table once).
    pub runs: u64,
    /// Runs that failed part-way (logged, retried at the next interval).
    pub failed_runs: u64,
    /// Processed events deleted.
    pub events_deleted: u64,
    /// Inbox marks deleted.
    pub inbox_deleted: u64,
}

#[derive(Debug, Default)]
struct Counters {
    runs: AtomicU64,
    failed_runs: AtomicU64,
    events_deleted: AtomicU64,
    inbox_deleted: AtomicU64,
}

impl Counters {
    fn snapshot(&self) -> CleanerStats {
        CleanerStats {
            runs: self.runs.load(Ordering::SeqCst),
            failed_runs: self.failed_runs.load(Ordering::SeqCst),
            events_deleted: self.events_deleted.load(Ordering::SeqCst),
            inbox_deleted: self.inbox_deleted.load(Ordering::SeqCst),
        }
    }
}

/// Entry point: `Cleaner::spawn(pool, schema, config)`.
#[derive(Debug)]
pub struct Cleaner;

impl Cleaner {
    /// Validates `config` and starts the cleaner on the current tokio
    /// runtime. It runs at once, then every `interval_secs`; a failed run
    /// is logged and tried again at the next interval. It needs one
    /// connection of `pool` while it runs.
    ///
    /// ```no_run
    /// # async fn f(pool: sqlx::PgPool) -> outbox::Result<()> {
    /// use outbox::{Cleaner, CleanerConfig, Schema};
    /// let cleaner = Cleaner::spawn(pool, Schema::default(), CleanerConfig::default())?;
    /// // … run the relay …
    /// let totals = cleaner.shutdown().await?;
    /// # Ok(()) }
    /// ```
    pub fn spawn(pool: PgPool, schema: Schema, config: CleanerConfig) -> Result<CleanerHandle> {
        Self::spawn_over(config, move || vec![(pool.clone(), schema.clone())])
    }

    /// As [`Cleaner::spawn`], over the schemas `targets` returns (each with
    /// the pool of its database), asked again before every run: a relay of
    /// many sources cleans the schemas it serves at that moment (those a
    /// pattern finds come and go). A run cleans them one after the other,
    /// so it needs one connection at a time whatever their number; a schema
    /// whose cleanup fails is logged and the others are still cleaned (the
    /// run counts as failed).
    pub fn spawn_over<F>(config: CleanerConfig, targets: F) -> Result<CleanerHandle>
    where
        F: Fn() -> Vec<(PgPool, Schema)> + Send + Sync + 'static,
    {
        config.validate()?;
        let counters = Arc::new(Counters::default());
        let (shutdown_tx, shutdown_rx) = watch::channel(false);
        let task = tokio::spawn(run(targets, config, counters.clone(), shutdown_rx));
        Ok(CleanerHandle {
            shutdown: shutdown_tx,
            task,
            counters,
        })
    }
}

/// The cleanups of one schema, each with its retention in seconds.
fn jobs(schema: &Schema, config: &CleanerConfig) -> Vec<(Cleanup, u64)> {
    let mut jobs = vec![(
        Cleanup::new(schema, CleanupTarget::Events),
        config.events_retention_secs,
    )];
    if let Some(secs) = config.inbox_retention_secs {
        jobs.push((Cleanup::new(schema, CleanupTarget::Inbox), secs));
    }
    jobs
}

async fn run<F>(
    targets: F,
    config: CleanerConfig,
    counters: Arc<Counters>,
    mut shutdown: watch::Receiver<bool>,
) where
    F: Fn() -> Vec<(PgPool, Schema)>,
{
    let interval = Duration::from_secs(config.interval_secs);
    while !*shutdown.borrow() {
        let (mut complete, mut failed) = (true, false);
        for (pool, schema) in targets() {
            if *shutdown.borrow() {
                complete = false;
                break;
            }
            let jobs = jobs(&schema, &config);
            let batch_size = config.batch_size;
            match run_once(&pool, &schema, &jobs, batch_size, &counters, &shutdown).await {
                Ok(true) => {}
                Ok(false) => complete = false,
                Err(e) => {
                    failed = true;
                    tracing::warn!(schema = schema.name(), error = %e, "cleanup run failed; trying again at the next interval");
                }
            }
        }
        if failed {
            counters.failed_runs.fetch_add(1, Ordering::SeqCst);
        } else if complete {
            counters.runs.fetch_add(1, Ordering::SeqCst);
        }
        tokio::select! {
            _ = tokio::time::sleep(interval) => {}
            _ = shutdown.changed() => {}
        }
    }
}

/// One run: every job, batch by batch, stopping between batches on
/// shutdown. Returns whether the run completed.
async fn run_once(
    pool: &PgPool,
    schema: &Schema,
    jobs: &[(Cleanup, u64)],
    batch_size: u32,
    counters: &Counters,
    shutdown: &watch::Receiver<bool>,
) -> Result<bool> {
    let mut conn = pool.acquire().await.map_err(Error::db("connecting"))?;
    for (cleanup, retention_secs) in jobs {
        let params = CleanupParams {
            older_than: Duration::from_secs(*retention_secs),
            batch_size,
        };
        let cutoff = cleanup.cutoff(&mut conn, params.older_than).await?;
        let counter = match cleanup.target() {
            CleanupTarget::Events => &counters.events_deleted,
            CleanupTarget::Inbox => &counters.inbox_deleted,
        };
        let mut deleted = 0;
        loop {
            if *shutdown.borrow() {
                return Ok(false);
            }
            let n = cleanup.delete_batch(&mut conn, cutoff, batch_size).await?;
            counter.fetch_add(n, Ordering::SeqCst);
            deleted += n;
            if n < u64::from(batch_size) {
                break;
            }
        }
        if deleted > 0 {
            tracing::info!(
                schema = schema.name(),
                table = cleanup.target().table(),
                deleted,
                retention_secs,
                "cleaner deleted old rows"
            );
        }
    }
    Ok(true)
}

/// A running cleaner.
#[derive(Debug)]
pub struct CleanerHandle {
    shutdown: watch::Sender<bool>,
    task: JoinHandle<()>,
    counters: Arc<Counters>,
}

impl CleanerHandle {
    /// Running totals.
    pub fn stats(&self) -> CleanerStats {
        self.counters.snapshot()
    }

    /// Whether the cleaner has stopped.
    pub fn is_finished(&self) -> bool {
        self.task.is_finished()
    }

    /// Stops the cleaner: a batch in progress finishes (each is one short
    /// statement), no new one starts. Returns the final totals.
    pub async fn shutdown(self) -> Result<CleanerStats> {
        let _ = self.shutdown.send(true);
        if let Err(e) = self.task.await {
            tracing::error!(error = %e, "cleaner task panicked");
        }
        Ok(self.counters.snapshot())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_bad_values_name_field_value_and_range() {
        CleanerConfig::default().validate().unwrap();
        for (config, field) in [
            (
                CleanerConfig {
                    events_retention_secs: 0,
                    ..Default::default()
                },
                "events_retention_secs",
            ),
            (
                CleanerConfig {
                    inbox_retention_secs: Some(0),
                    ..Default::default()
                },
                "inbox_retention_secs",
            ),
            (
                CleanerConfig {
                    interval_secs: 0,
                    ..Default::default()
                },
                "interval_secs",
            ),
            (
                CleanerConfig {
                    batch_size: 0,
                    ..Default::default()
                },
                "batch_size",
            ),
        ] {
            let msg = config.validate().unwrap_err().to_string();
            assert!(
                msg.contains(field) && msg.contains(" 0 ") && msg.contains("use 1 to"),
                "{msg}"
            );
        }
    }

    #[test]
    fn unknown_keys_are_rejected_and_missing_ones_default() {
        let err = serde_json::from_str::<CleanerConfig>(r#"{"interval_sec": 3}"#).unwrap_err();
        assert!(err.to_string().contains("interval_sec"), "{err}");
        let c: CleanerConfig = serde_json::from_str(r#"{"inbox_retention_secs": 86400}"#).unwrap();
        assert_eq!(c.inbox_retention_secs, Some(86_400));
        assert_eq!(c.events_retention_secs, 604_800);
    }
}
