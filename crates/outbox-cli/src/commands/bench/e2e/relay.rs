//! `outbox relay --publisher SPEC` as a child process, publishing to a real
//! broker.
//!
//! [`super::super::child_relay::ChildRelay`] always passes `--publisher
//! stdout` (and clap refuses the flag twice) and removes every `OUTBOX_*`
//! variable, which the webhook's secret needs; so this runs the relay the
//! same way (its own process group under the same watchdog, the same
//! `application_name`, the bench's `OUTBOX_*` settings not passed on) with
//! the broker's spec instead. A `publisher` argument on `ChildRelay` would
//! make this file unnecessary.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use outbox::Schema;
use outbox_embedded_pg::process::{Group, Signal, Watchdog};

use super::super::child_relay::RELAY_APPLICATION_NAME;

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
        let exe =
            std::env::current_exe().context("cannot find the outbox program to run the relay")?;
        let mut cmd = Command::new(exe);
        cmd.args(["relay", "--publisher", spec, "--schema", schema.name()])
            .args(["--instance-id", INSTANCE, "--log-level", "warn"]);
        for (name, _) in std::env::vars_os() {
            if name.to_str().is_some_and(|n| n.starts_with("OUTBOX_")) {
                cmd.env_remove(name);
            }
        }
        cmd.envs(env.iter().copied())
            .env("DATABASE_URL", url)
            .env("PGAPPNAME", RELAY_APPLICATION_NAME)
            .stdout(Stdio::null())
            .stderr(Stdio::inherit());
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
