//! `outbox relay --publisher SPEC` as a child process, publishing to a real
//! broker.
//!
//! The command line is [`relay_command`]'s, as for every child relay (its
//! sessions named, gone with the bench even after a SIGKILL, none of the
//! bench's `OUTBOX_*` settings), with the broker's spec and the
//! publisher's secret; what differs from `ChildRelay` is only that its
//! output is not read.

use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use outbox::Schema;
use outbox_embedded_pg::process::{Group, Signal, Watchdog};

use super::super::child_relay::relay_command;

/// How long a stopped relay may take to exit before it is killed.
const STOP_GRACE: Duration = Duration::from_secs(15);

/// The relay's `--instance-id`.
pub const INSTANCE: &str = "bench-e2e-relay";

/// A running `outbox relay` publishing to a broker.
pub struct Relay {
    group: Group,
}

impl Relay {
    /// Starts the relay on `url` and `schema`, publishing to `spec`, with
    /// `env` (the publisher's secret) added to a clean environment.
    pub fn spawn(url: &str, schema: &Schema, spec: &str, env: &[(&str, &str)]) -> Result<Relay> {
        let mut cmd = relay_command(url, schema, INSTANCE, spec, env)?;
        cmd.stdout(Stdio::null()).stderr(Stdio::inherit());
        let group = Group::spawn(cmd, &Watchdog::kill_group())
            .context("cannot start `outbox relay` as a child process")?;
        Ok(Relay { group })
    }

    /// The relay's process id (for its CPU time).
    pub fn pid(&self) -> u32 {
        self.group.id()
    }

    /// Fails if the relay has exited.
    pub fn check_running(&mut self) -> Result<()> {
        if let Some(status) = self.group.exited() {
            bail!("the child `outbox relay` exited early ({status}); its log is above");
        }
        Ok(())
    }

    /// Stops the relay (SIGTERM; killed after a grace period).
    pub async fn stop(mut self) -> Result<()> {
        self.group.signal(Signal::Term);
        let deadline = Instant::now() + STOP_GRACE;
        while self.group.exited().is_none() && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let exited = self.group.exited();
        self.group.kill();
        match exited {
            Some(status) if status.success() => Ok(()),
            Some(status) => bail!("the child `outbox relay` ended with {status}"),
            None => bail!(
                "the child `outbox relay` did not stop within {} s of SIGTERM and was killed",
                STOP_GRACE.as_secs()
            ),
        }
    }
}
