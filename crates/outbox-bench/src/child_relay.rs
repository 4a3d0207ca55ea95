//! `outbox relay` as a child process of the bench: this same program, on the
//! bench's server and schema, run the way a user runs it beside a service
//! that writes events by plain SQL.
//!
//! The child never outlives the bench: dropping [`ChildRelay`] kills it (an
//! error, Ctrl-C), and a bench killed outright (`SIGKILL`) ends it too. The
//! relay runs with `--exit-with-parent`, so it stops as soon as the bench is
//! gone, even while the dead bench is an unreaped zombie that still holds
//! nothing but its pid; it also leads a process group of its own under a
//! watchdog, which kills the group once the bench is reaped.

use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::io::Read;
use std::process::{Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use outbox::Schema;
use outbox_embedded_pg::process::{Group, Signal, Watchdog};
use serde::Deserialize;
use sqlx::PgPool;
use uuid::Uuid;

/// How long a stopped relay may take to finish its batch and exit before it
/// is killed.
const STOP_GRACE: Duration = Duration::from_secs(15);

/// How often the bench looks at the child and the database while waiting.
const LOOK_EVERY: Duration = Duration::from_millis(10);

/// The `application_name` of the child relay's database sessions.
pub const RELAY_APPLICATION_NAME: &str = "outbox-bench-relay";

/// What becomes of the child's standard output.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Output {
    /// Read line by line; each event's first line is timed ([`Lines`]).
    Timed,
    /// Thrown away (`/dev/null`).
    Discard,
}

/// The events seen on the child's standard output.
#[derive(Default)]
pub struct Lines {
    /// Each event's id and the moment its first line was read.
    pub first_seen: Mutex<HashMap<Uuid, Instant>>,
    /// Distinct events seen.
    pub distinct: AtomicU64,
    /// Lines for an event seen before (at-least-once redeliveries).
    pub duplicates: AtomicU64,
    /// Lines that were not an event's JSON.
    pub unparsed: AtomicU64,
}

impl Lines {
    fn record(&self, line: &[u8], at: Instant) {
        #[derive(Deserialize)]
        struct Line {
            id: Uuid,
        }
        match serde_json::from_slice::<Line>(line) {
            Ok(l) => {
                // The first delivery's time is kept.
                match self.first_seen.lock().expect("lock").entry(l.id) {
                    Entry::Vacant(v) => {
                        v.insert(at);
                        self.distinct.fetch_add(1, Ordering::Relaxed);
                    }
                    Entry::Occupied(_) => {
                        self.duplicates.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
            Err(_) => {
                self.unparsed.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

/// A running `outbox relay --publisher stdout`.
pub struct ChildRelay {
    group: Group,
    instance: String,
    reader: Option<JoinHandle<()>>,
    lines: Option<Arc<Lines>>,
}

impl ChildRelay {
    /// Starts the relay on `url` and `schema` with default settings: the
    /// bench's own environment (config file, `OUTBOX_*` variables) is not
    /// passed on, so every run measures the same relay.
    pub fn spawn(url: &str, schema: &Schema, instance: &str, output: Output) -> Result<ChildRelay> {
        Self::spawn_with(url, schema, instance, output, &[])
    }

    /// [`ChildRelay::spawn`] with more `outbox relay` flags.
    pub fn spawn_with(
        url: &str,
        schema: &Schema,
        instance: &str,
        output: Output,
        extra: &[&str],
    ) -> Result<ChildRelay> {
        let mut cmd = relay_command(url, schema, instance, "stdout", &[])?;
        cmd.args(extra);
        Self::spawn_command(cmd, instance, output)
    }

    /// A relay publishing to `publisher` (a broker's spec) instead of
    /// stdout, with `env` (the publisher's secret) added to its clean
    /// environment; its output is not read.
    pub fn spawn_publishing(
        url: &str,
        schema: &Schema,
        instance: &str,
        publisher: &str,
        env: &[(&str, &str)],
    ) -> Result<ChildRelay> {
        let cmd = relay_command(url, schema, instance, publisher, env)?;
        Self::spawn_command(cmd, instance, Output::Discard)
    }

    /// Starts `cmd` (an `outbox relay` command line) as instance
    /// `instance`.
    pub(super) fn spawn_command(
        mut cmd: Command,
        instance: &str,
        output: Output,
    ) -> Result<ChildRelay> {
        cmd.stderr(Stdio::inherit());
        let (lines, reader) = match output {
            Output::Discard => {
                cmd.stdout(Stdio::null());
                (None, None)
            }
            Output::Timed => {
                let (tx, rx) =
                    tokio::net::unix::pipe::pipe().context("cannot create a pipe for the relay")?;
                // Both ends blocking: the child writes with plain writes, a
                // thread of ours reads. The write end goes to the child; ours
                // is closed when `Group::spawn` drops `cmd`, so the reader
                // sees the end of the stream when the child exits.
                cmd.stdout(Stdio::from(tx.into_blocking_fd()?));
                let rx = std::fs::File::from(rx.into_blocking_fd()?);
                (Some(Arc::new(Lines::default())), Some(rx))
            }
        };
        let group = Group::spawn(cmd, &Watchdog::kill_group())
            .context("cannot start `outbox relay` as a child process")?;
        let reader = match (reader, &lines) {
            (Some(rx), Some(lines)) => {
                let lines = lines.clone();
                Some(
                    std::thread::Builder::new()
                        .name("relay-stdout".into())
                        .spawn(move || read_lines(rx, &lines))
                        .context("cannot start the relay's output reader")?,
                )
            }
            _ => None,
        };
        Ok(ChildRelay {
            group,
            instance: instance.to_owned(),
            reader,
            lines,
        })
    }

    /// What the relay printed so far ([`Output::Timed`] only).
    pub fn lines(&self) -> Option<&Arc<Lines>> {
        self.lines.as_ref()
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

    /// Waits until the relay holds every partition of `schema` and has
    /// announced that it is idle (`outbox_relay_idle_until` is ahead of now).
    pub async fn wait_idle(
        &mut self,
        pool: &PgPool,
        schema: &Schema,
        within: Duration,
    ) -> Result<()> {
        let s = schema.name();
        // A relay announces itself idle only where the schema has the idle
        // wake-up trigger; elsewhere, idle is nothing pending.
        let sql = format!(
            "SELECT (CASE WHEN EXISTS (SELECT 1 FROM pg_trigger
                                        WHERE tgname = 'outbox_wake_idle_relay'
                                          AND tgrelid = '{s}.outbox_events'::regclass)
                          THEN coalesce(pg_sequence_last_value('{s}.outbox_relay_idle_until'), 0)
                               > date_part('epoch', now()) * 1000
                          ELSE NOT EXISTS (SELECT 1 FROM {s}.outbox_events
                                           WHERE processed_at IS NULL AND dead_lettered_at IS NULL)
                     END)
                AND (SELECT bool_and(owner = $1 AND lease_until > now()) FROM {s}.outbox_partitions)"
        );
        let deadline = Instant::now() + within;
        loop {
            self.check_running()?;
            let ready: Option<bool> = sqlx::query_scalar(&sql)
                .bind(&self.instance)
                .fetch_one(pool)
                .await?;
            if ready == Some(true) {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!(
                    "the child `outbox relay` did not hold every partition and become idle within {} s",
                    within.as_secs()
                );
            }
            tokio::time::sleep(LOOK_EVERY).await;
        }
    }

    /// Stops the relay gracefully (SIGTERM; killed after a grace period)
    /// and waits for its output to be read to the end.
    pub async fn stop(mut self) -> Result<ExitStatus> {
        self.group.signal(Signal::Term);
        let deadline = Instant::now() + STOP_GRACE;
        let status = loop {
            if let Some(status) = self.group.exited() {
                break Some(status);
            }
            if Instant::now() > deadline {
                break None;
            }
            tokio::time::sleep(LOOK_EVERY).await;
        };
        // Kills whatever is left and ends the watchdog.
        self.group.kill();
        if let Some(reader) = self.reader.take() {
            let _ = tokio::task::spawn_blocking(move || reader.join()).await;
        }
        match status {
            Some(status) => Ok(status),
            None => bail!(
                "the child `outbox relay` did not stop within {} s of SIGTERM and was killed",
                STOP_GRACE.as_secs()
            ),
        }
    }
}

/// Reads the relay's output until it ends, timing each read as it returns:
/// every line a read brings is stamped with that moment.
fn read_lines(mut rx: impl Read, lines: &Lines) {
    let mut buf = vec![0u8; 1 << 16];
    let mut partial: Vec<u8> = Vec::new();
    loop {
        let n = match rx.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        };
        let at = Instant::now();
        let mut chunk = &buf[..n];
        while let Some(end) = chunk.iter().position(|&b| b == b'\n') {
            if partial.is_empty() {
                lines.record(&chunk[..end], at);
            } else {
                partial.extend_from_slice(&chunk[..end]);
                lines.record(&partial, at);
                partial.clear();
            }
            chunk = &chunk[end + 1..];
        }
        partial.extend_from_slice(chunk);
    }
}

/// The command line of a child `outbox relay` on `url` and `schema`,
/// publishing to `publisher` (see [`child_command`]), seeing only `env`
/// of its own (a publisher's secret, say).
pub fn relay_command(
    url: &str,
    schema: &Schema,
    instance: &str,
    publisher: &str,
    env: &[(&str, &str)],
) -> Result<Command> {
    let mut cmd = child_command(
        None,
        &["--publisher", publisher, "--schema", schema.name()],
        instance,
    )?;
    cmd.envs(env.iter().copied()).env("DATABASE_URL", url);
    Ok(cmd)
}

/// `outbox [--config PATH] relay ARGS… --instance-id INSTANCE` as every
/// bench runs its relays: it names its sessions
/// ([`RELAY_APPLICATION_NAME`]), so the database's CPU can be told apart
/// by who spent it; it stops when this process dies, even by SIGKILL
/// (`--exit-with-parent`); and it sees none of the bench's `OUTBOX_*`
/// settings or `DATABASE_URL`.
pub(super) fn child_command(
    config: Option<&std::path::Path>,
    relay_args: &[&str],
    instance: &str,
) -> Result<Command> {
    let exe = std::env::current_exe().context("cannot find the outbox program to run the relay")?;
    let mut cmd = Command::new(exe);
    if let Some(config) = config {
        cmd.arg("--config").arg(config);
    }
    cmd.arg("relay").args(relay_args).args([
        "--instance-id",
        instance,
        "--log-level",
        "warn",
        "--exit-with-parent",
        &std::process::id().to_string(),
    ]);
    for (name, _) in std::env::vars_os() {
        if name.to_str().is_some_and(|n| n.starts_with("OUTBOX_")) {
            cmd.env_remove(name);
        }
    }
    cmd.env_remove("DATABASE_URL")
        .env("PGAPPNAME", RELAY_APPLICATION_NAME);
    Ok(cmd)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_split_across_reads_are_joined_and_the_first_delivery_counts() {
        let a = Uuid::new_v4();
        let b = Uuid::new_v4();
        let text = format!(
            "{{\"id\":\"{a}\",\"seq\":1}}\n{{\"id\":\"{b}\",\"seq\":2}}\nnot json\n{{\"id\":\"{a}\",\"seq\":1}}\n"
        );
        // A reader that returns three bytes at a time.
        struct Trickle<'a>(&'a [u8]);
        impl Read for Trickle<'_> {
            fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
                let n = self.0.len().min(3).min(out.len());
                out[..n].copy_from_slice(&self.0[..n]);
                self.0 = &self.0[n..];
                Ok(n)
            }
        }
        let lines = Lines::default();
        read_lines(Trickle(text.as_bytes()), &lines);
        assert_eq!(lines.distinct.load(Ordering::Relaxed), 2);
        assert_eq!(lines.duplicates.load(Ordering::Relaxed), 1);
        assert_eq!(lines.unparsed.load(Ordering::Relaxed), 1);
        let seen = lines.first_seen.lock().unwrap();
        assert!(seen.contains_key(&a) && seen.contains_key(&b));
    }
}
