//! How `outbox relay` stops, whatever it serves: no new claims, in-flight
//! batches published and acknowledged within `shutdown_timeout_secs`, then
//! the tasks around the relay (probes, cleaner, span export); past the
//! deadline, or at a second signal, the process exits 1 at once.

use std::process::ExitCode;
use std::sync::atomic::Ordering;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use outbox::CleanerHandle;

use super::stop::{Signals, StopReason};
use super::Daemon;
use crate::ctx::Ctx;

/// Extra time past `shutdown_timeout_secs` before the process exits no
/// matter what (a publisher stuck in a system call cannot be cancelled).
const HARD_EXIT_GRACE: Duration = Duration::from_secs(2);

/// Stops `daemon`, which stopped being watched for `watched`; prints the
/// summary. An error when the relay stopped by itself or could not drain.
pub(super) async fn stop(
    ctx: &Ctx,
    daemon: Daemon,
    watched: Result<StopReason>,
    signals: &mut Signals,
) -> Result<ExitCode> {
    let loaded = &ctx.loaded;
    let c = &loaded.config;
    let reason = match &watched {
        Ok(reason) => reason.to_string(),
        Err(e) => e.to_string(),
    };
    daemon.state.stopping.store(true, Ordering::Relaxed);
    let deadline = Duration::from_secs(c.shutdown_timeout_secs);
    tracing::info!(
        %reason,
        timeout_secs = c.shutdown_timeout_secs,
        "relay stopping: finishing in-flight batches and releasing partitions"
    );
    let late = format!(
        "{} ({})",
        deadline_message(c.shutdown_timeout_secs),
        loaded.origin("shutdown_timeout_secs").describe()
    );
    exit_after(deadline + HARD_EXIT_GRACE, late.clone());
    let result = tokio::select! {
        r = daemon.running.shutdown_within(deadline) => r,
        again = signals.next() => {
            eprintln!("error: {again} during shutdown: stopped at once; in-flight batches will be delivered again");
            std::process::exit(1);
        }
    };
    let _ = daemon.stop.send(true);
    for task in &daemon.background {
        task.abort();
    }
    if let Some(cleaner) = daemon.cleaner {
        stop_cleaner(cleaner).await;
    }
    if let Some(export) = daemon.export {
        export.shutdown().await;
    }
    let stats = match result {
        Ok(stats) => stats,
        Err(outbox::Error::ShutdownTimeout(_)) => {
            // A publisher stuck in a system call would also hold up the
            // runtime's own shutdown: leave now.
            eprintln!("error: {late}");
            std::process::exit(1);
        }
        Err(e) => return Err(e).context("the relay failed while stopping"),
    };
    tracing::info!(
        %reason,
        delivered = stats.delivered,
        retried = stats.retried,
        dead_lettered = stats.dead_lettered,
        "relay stopped"
    );
    if watched? == StopReason::RelayStopped {
        bail!("the relay stopped on its own; see the log above");
    }
    if c.drain {
        eprintln!(
            "relay: {reason}; delivered {} events, {} retried, {} dead-lettered",
            stats.delivered, stats.retried, stats.dead_lettered
        );
    }
    Ok(ExitCode::SUCCESS)
}

async fn stop_cleaner(cleaner: CleanerHandle) {
    match cleaner.shutdown().await {
        Ok(totals) => tracing::info!(
            events_deleted = totals.events_deleted,
            inbox_deleted = totals.inbox_deleted,
            "cleaner stopped"
        ),
        Err(e) => tracing::warn!(error = %e, "cleaner failed while stopping"),
    }
}

/// Ends the process with status 1 after `after`, whatever is still
/// running, saying `why`: the last resort behind the graceful deadline.
fn exit_after(after: Duration, why: String) {
    std::thread::spawn(move || {
        std::thread::sleep(after);
        eprintln!("error: {why}");
        std::process::exit(1);
    });
}

fn deadline_message(timeout_secs: u64) -> String {
    format!(
        "the relay did not stop within shutdown_timeout_secs = {timeout_secs}; exiting without acknowledging in-flight batches (they will be delivered again; their partitions move when their leases end)"
    )
}
