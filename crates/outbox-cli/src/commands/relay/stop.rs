//! Why `outbox relay` stops: a signal, `--drain` finding nothing pending,
//! the relay ending by itself, or the process that started it gone; and
//! the watch for the first of them.

use std::time::Duration;

use anyhow::{Context, Result};
use tokio::signal::unix::{signal, Signal, SignalKind};

use super::running::Running;
use super::wiring::DrainCheck;
use crate::progress::Progress;

/// How often a relay started with `--exit-with-parent` looks at its parent.
const PARENT_CHECK: Duration = Duration::from_millis(200);

/// How often the daemon checks whether the relay stopped by itself: an
/// idle relay's own wake-ups. (With `--drain`, the relay's drain tick.)
const TICK: Duration = Duration::from_secs(1);

/// Why `outbox relay` stops.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum StopReason {
    /// SIGTERM or SIGINT.
    Signal(&'static str),
    /// `--drain`: nothing pending is left.
    Drained,
    /// The relay ended by itself (a fatal error, logged where it happened).
    RelayStopped,
    /// `--exit-with-parent`: the process that started the relay is gone.
    ParentGone,
}

impl std::fmt::Display for StopReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            StopReason::Signal(name) => name,
            StopReason::Drained => "drained",
            StopReason::RelayStopped => "relay stopped",
            StopReason::ParentGone => "parent process gone",
        })
    }
}

/// What asks the relay to stop from outside: SIGTERM, SIGINT and, with
/// `--exit-with-parent PID`, the end of process PID.
pub(super) struct Signals {
    term: Signal,
    int: Signal,
    /// The parent's pid while it is watched; taken once it is gone, so
    /// that its end stops the relay once (gracefully), not twice.
    parent: Option<u32>,
}

impl Signals {
    pub(super) fn install(exit_with_parent: Option<u32>) -> Result<Self> {
        Ok(Signals {
            term: signal(SignalKind::terminate()).context("cannot handle SIGTERM")?,
            int: signal(SignalKind::interrupt()).context("cannot handle SIGINT")?,
            parent: exit_with_parent,
        })
    }

    pub(super) async fn next(&mut self) -> StopReason {
        let parent = self.parent;
        tokio::select! {
            _ = self.term.recv() => StopReason::Signal("SIGTERM"),
            _ = self.int.recv() => StopReason::Signal("SIGINT"),
            () = parent_gone(parent) => {
                self.parent = None;
                StopReason::ParentGone
            }
        }
    }
}

/// Runs until a signal, the end of the backlog (`--drain`) or the relay's
/// own stop; returns why, or an error when a drain cannot end (a schema
/// without the outbox tables).
pub(super) async fn watch(
    running: &mut Running,
    drain: bool,
    signals: &mut Signals,
) -> Result<StopReason> {
    let mut progress = Progress::stderr("relay", drain);
    let every = if drain { running.drain_tick() } else { TICK };
    let mut tick = tokio::time::interval(every);
    let reason = loop {
        tokio::select! {
            sig = signals.next() => break Ok(sig),
            _ = tick.tick() => {
                if running.is_finished() {
                    break Ok(StopReason::RelayStopped);
                }
                if !drain {
                    continue;
                }
                match running.pending().await {
                    Ok(0) => break Ok(StopReason::Drained),
                    Ok(n) => progress.update(running.stats().delivered, Some(n as u64)),
                    Err(DrainCheck::Unmigrated(e)) => break Err(e),
                    Err(DrainCheck::NotYet) => {}
                    Err(DrainCheck::Failed(e)) => {
                        tracing::warn!(error = %crate::text::error_chain(&e), "drain check failed")
                    }
                }
            }
        }
    };
    progress.finish();
    reason
}

/// Returns once process `parent` is no longer this process's parent; never
/// without one.
///
/// A dead parent's children are handed to another process the moment it
/// exits, before anyone reaps it, so the parent id changes even while the
/// dead parent lingers as a zombie, which `kill -0` would still find.
async fn parent_gone(parent: Option<u32>) {
    let Some(parent) = parent else {
        return std::future::pending().await;
    };
    while !is_gone(parent, std::os::unix::process::parent_id()) {
        tokio::time::sleep(PARENT_CHECK).await;
    }
}

/// Whether the parent that was `expected` is gone, the parent now being
/// `now`.
fn is_gone(expected: u32, now: u32) -> bool {
    now != expected
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_parent_is_gone_once_another_process_adopted_us() {
        assert!(!is_gone(4242, 4242));
        assert!(is_gone(4242, 1));
        assert!(is_gone(4242, 977), "a subreaper adopted us");
    }

    #[tokio::test]
    async fn our_own_living_parent_is_not_gone() {
        let parent = std::os::unix::process::parent_id();
        let watch = parent_gone(Some(parent));
        let verdict = tokio::time::timeout(3 * PARENT_CHECK, watch).await;
        assert!(verdict.is_err(), "the living parent was taken for gone");
        let gone = tokio::time::timeout(3 * PARENT_CHECK, parent_gone(Some(parent + 1))).await;
        assert!(
            gone.is_ok(),
            "another pid than our parent's is gone at once"
        );
    }
}
