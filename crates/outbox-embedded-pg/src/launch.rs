//! One start of the server: `initdb`, the command line, the process group
//! and its watchdog, the wait for readiness, and why a start failed.

use std::ffi::OsString;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::process::{
    child_outputs, log_len, open_log, read_since, tail, Group, LogMode, NotReady, Signal, Watchdog,
};
use crate::ready::{accepts_connections, postmaster_pid, postmaster_says_ready};
use crate::run_as::RunAs;
use crate::{PgError, PgOptions, SUPERUSER};

/// How long a start (or restart) may take before it is given up.
pub(crate) const READY_TIMEOUT: Duration = Duration::from_secs(30);

/// Interval between readiness checks.
const POLL: Duration = Duration::from_millis(20);

/// How long an orphaned server gets for its immediate shutdown before the
/// watchdog kills it.
const ORPHAN_GRACE: Duration = Duration::from_secs(10);

/// How many lines of the server log go into an error.
const LOG_TAIL_LINES: usize = 40;

/// What starting the server needs: its binaries, its files, its settings
/// and the user it runs as.
#[derive(Debug)]
pub(crate) struct Launcher {
    pub(crate) bin_dir: PathBuf,
    pub(crate) base_dir: PathBuf,
    pub(crate) data_dir: PathBuf,
    pub(crate) log_path: PathBuf,
    pub(crate) opts: PgOptions,
    pub(crate) run_as: Option<RunAs>,
}

/// A running server: its process group and the postmaster's pid.
#[derive(Debug)]
pub(crate) struct Server {
    pub(crate) group: Group,
    pub(crate) postmaster_pid: u32,
}

impl Launcher {
    /// A launcher for a cluster in `base_dir` (`data/`, `postgres.log`).
    pub(crate) fn new(
        bin_dir: PathBuf,
        base_dir: PathBuf,
        opts: PgOptions,
        run_as: Option<RunAs>,
    ) -> Launcher {
        Launcher {
            bin_dir,
            data_dir: base_dir.join("data"),
            log_path: base_dir.join("postgres.log"),
            base_dir,
            opts,
            run_as,
        }
    }

    /// A `Command` running `program` as the user the server runs as.
    fn command(&self, program: &Path) -> Command {
        let mut cmd = match &self.run_as {
            Some(run_as) => run_as.command(program),
            None => Command::new(program),
        };
        // The server user may not be able to enter the caller's directory.
        cmd.current_dir(&self.base_dir).stdin(Stdio::null());
        cmd
    }

    pub(crate) fn initdb(&self) -> Result<(), PgError> {
        let output = self
            .command(&self.bin_dir.join("initdb"))
            .arg("-D")
            .arg(&self.data_dir)
            .args([
                "-A",
                "trust",
                "-U",
                SUPERUSER,
                "--no-sync",
                "-E",
                "UTF8",
                "--locale=C",
            ])
            .output()
            .map_err(|e| PgError::io("running initdb", e))?;
        let mut text = String::from_utf8_lossy(&output.stdout).into_owned();
        text.push_str(&String::from_utf8_lossy(&output.stderr));
        // Best effort: the log is for people debugging a failed start.
        if let Ok(mut log) = open_log(&self.log_path, LogMode::Append) {
            let _ = writeln!(log, "--- initdb ---\n{text}--- end of initdb ---");
        }
        if output.status.success() {
            Ok(())
        } else {
            Err(PgError::Initdb {
                status: output.status,
                output: text,
            })
        }
    }

    /// The `postgres` arguments for `port`.
    fn server_args(&self, port: u16) -> Vec<OsString> {
        let mut args: Vec<OsString> = vec![
            "-D".into(),
            self.data_dir.clone().into(),
            "-p".into(),
            port.to_string().into(),
        ];
        let mut conf = |name: &str, value: &str| {
            args.push("-c".into());
            args.push(format!("{name}={value}").into());
        };
        conf("listen_addresses", "127.0.0.1");
        conf("unix_socket_directories", &self.base_dir.to_string_lossy());
        if !self.opts.fsync {
            conf("fsync", "off");
            conf("synchronous_commit", "off");
            conf("full_page_writes", "off");
        }
        conf("max_connections", &self.opts.max_connections.to_string());
        conf("shared_buffers", "128MB");
        for (name, value) in &self.opts.extra_conf {
            conf(name, value);
        }
        args
    }

    /// The watchdog for the server: an immediate shutdown once the owner is
    /// gone, and the cluster's directory removed unless it is to be kept.
    fn watchdog(&self) -> Watchdog {
        let watchdog = Watchdog::signal_pid_file(
            Signal::Quit,
            self.data_dir.join("postmaster.pid"),
            ORPHAN_GRACE,
        );
        if self.opts.keep_on_drop {
            watchdog
        } else {
            watchdog.removing(self.base_dir.clone())
        }
    }

    /// Starts the server on `port` in a process group of its own and waits
    /// until it accepts connections.
    pub(crate) fn launch(&self, port: u16, deadline: Instant) -> Result<Server, Failure> {
        let log_start = log_len(&self.log_path);
        let (out, err) = child_outputs(&self.log_path, LogMode::Append)
            .map_err(|e| Failure::io("opening the server log", e))?;
        let mut cmd = self.command(&self.bin_dir.join("postgres"));
        cmd.args(self.server_args(port)).stdout(out).stderr(err);
        let mut group =
            Group::spawn(cmd, &self.watchdog()).map_err(|e| Failure::io("starting postgres", e))?;

        // Like `pg_ctl start`, wait for the postmaster to report "ready" in
        // its pid file (probing earlier only fills the log with "the
        // database system is starting up"), then check that it accepts a
        // connection on the port. The file read before the probe may still
        // be a killed predecessor's, so the pid is read again after it.
        let mut pid = None;
        let waited = group.wait_ready(deadline, POLL, || {
            pid = (postmaster_says_ready(&self.data_dir) && accepts_connections(port))
                .then(|| postmaster_pid(&self.data_dir))
                .flatten();
            pid.is_some()
        });
        let log = || read_since(&self.log_path, log_start);
        match waited {
            Ok(()) => Ok(Server {
                group,
                postmaster_pid: pid.expect("ready only once the pid is read"),
            }),
            Err(NotReady::Exited(status)) => {
                let log = log();
                Err(Failure {
                    reason: format!("the server exited ({status})"),
                    retry: Retry::after(&log),
                    log_tail: tail(&log, LOG_TAIL_LINES),
                })
            }
            Err(NotReady::TimedOut) => {
                // Dropping the group kills it.
                drop(group);
                Err(Failure {
                    reason: format!(
                        "it did not accept connections within {} s",
                        READY_TIMEOUT.as_secs()
                    ),
                    log_tail: tail(&log(), LOG_TAIL_LINES),
                    retry: Retry::No,
                })
            }
        }
    }
}

/// Whether a failed start may succeed when tried again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Retry {
    /// The port was taken: try another one.
    NewPort,
    /// A previous server's processes still hold the data directory: wait.
    SamePort,
    /// Trying again will not help.
    No,
}

impl Retry {
    /// What the log of a server that exited during its start says about
    /// trying again.
    fn after(log: &str) -> Retry {
        if log.contains("Address already in use")
            || log.contains("could not create any TCP/IP sockets")
        {
            Retry::NewPort
        } else if log.contains("pre-existing shared memory block")
            || (log.contains("lock file") && log.contains("already exists"))
        {
            Retry::SamePort
        } else {
            Retry::No
        }
    }
}

/// A failed start attempt.
#[derive(Debug)]
pub(crate) struct Failure {
    reason: String,
    log_tail: String,
    pub(crate) retry: Retry,
}

impl Failure {
    fn io(context: &str, e: io::Error) -> Self {
        Failure {
            reason: format!("{context}: {e}"),
            log_tail: String::new(),
            retry: Retry::No,
        }
    }

    pub(crate) fn into_error(self, port: u16) -> PgError {
        PgError::Start {
            port,
            reason: self.reason,
            log_tail: self.log_tail,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_taken_port_or_a_busy_data_directory_is_worth_another_try() {
        for (log, retry) in [
            (
                "LOG:  could not bind IPv4 address \"127.0.0.1\": Address already in use",
                Retry::NewPort,
            ),
            (
                "FATAL:  pre-existing shared memory block (key 1, ID 2) is still in use",
                Retry::SamePort,
            ),
            (
                "FATAL:  lock file \"postmaster.pid\" already exists",
                Retry::SamePort,
            ),
            ("FATAL:  data directory has wrong ownership", Retry::No),
        ] {
            assert_eq!(Retry::after(log), retry, "{log}");
        }
    }
}
