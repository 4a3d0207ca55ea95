//! Real brokers for tests, started from the system's binaries on free ports
//! of `127.0.0.1`: [`rabbitmq::RabbitMq`] (`rabbitmq-server`) and
//! [`kafka::Tansu`] (a Kafka-protocol broker).
//!
//! Every broker runs in its own process group, killed when its handle is
//! dropped; a small `sh` watchdog also kills the group within about a second
//! after the test process dies, even by `SIGKILL`.
//!
//! A test that needs a broker that cannot be started fails, saying what is
//! missing, unless [`SKIP_ENV`] names that broker (see [`skipped`]).

pub mod kafka;
pub mod rabbitmq;

use std::fs;
use std::io;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

pub use crate::postgres::free_port;

/// Environment variable listing brokers whose tests are skipped instead of
/// failing when the broker cannot be started: comma-separated names such as
/// `rabbitmq,kafka-real`, or `all`.
pub const SKIP_ENV: &str = "OUTBOX_SKIP_BROKER_TESTS";

/// Whether [`SKIP_ENV`] names `broker` (or `all`). Case-insensitive.
pub fn skipped(broker: &str) -> bool {
    std::env::var(SKIP_ENV).is_ok_and(|list| {
        list.split([',', ' '])
            .map(str::trim)
            .any(|n| n.eq_ignore_ascii_case(broker) || n.eq_ignore_ascii_case("all"))
    })
}

/// Errors from starting a broker.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BrokerError {
    /// The broker's program is not installed.
    #[error("{broker} is not available: {hint} (or set {SKIP_ENV}={broker} to skip its tests)")]
    NotInstalled {
        /// The broker's name, as [`skipped`] knows it.
        broker: &'static str,
        /// What to install or set.
        hint: String,
    },
    /// The broker exited or did not become ready in time.
    #[error("{broker} did not start: {reason}\n--- last lines of {log} ---\n{tail}")]
    Start {
        /// The broker's name.
        broker: &'static str,
        /// What happened.
        reason: String,
        /// The log file read for `tail`.
        log: String,
        /// The end of the broker's log.
        tail: String,
    },
    /// Creating files or processes failed.
    #[error("{broker}: {context}: {source}")]
    Io {
        /// The broker's name.
        broker: &'static str,
        /// What was being done.
        context: String,
        /// The error.
        source: io::Error,
    },
}

impl BrokerError {
    /// Turns an I/O error of `broker` while `context` into a [`BrokerError::Io`].
    pub(crate) fn io(
        broker: &'static str,
        context: impl Into<String>,
    ) -> impl FnOnce(io::Error) -> BrokerError {
        let context = context.into();
        move |source| BrokerError::Io {
            broker,
            context,
            source,
        }
    }
}

/// A temporary directory `outbox-{broker}-…` for a broker's data and logs.
pub(crate) fn temp_dir(broker: &'static str) -> Result<tempfile::TempDir, BrokerError> {
    tempfile::Builder::new()
        .prefix(&format!("outbox-{broker}-"))
        .tempdir()
        .map_err(BrokerError::io(broker, "creating a temporary directory"))
}

/// Creates (truncates) `path` and returns it twice, as a child's stdout and
/// stderr.
pub(crate) fn log_to(broker: &'static str, path: &Path) -> Result<(Stdio, Stdio), BrokerError> {
    let context = || format!("creating {}", path.display());
    let out = fs::File::create(path).map_err(BrokerError::io(broker, context()))?;
    let err = out
        .try_clone()
        .map_err(BrokerError::io(broker, context()))?;
    Ok((Stdio::from(out), Stdio::from(err)))
}

/// Why a broker did not become ready.
pub(crate) enum NotReady {
    /// Its process exited.
    Exited(ExitStatus),
    /// The deadline passed.
    TimedOut,
}

/// Polls `ready` every `every` until it holds, `group`'s leader exits, or
/// `deadline` passes.
pub(crate) fn wait_ready(
    group: &mut Group,
    deadline: Instant,
    every: Duration,
    mut ready: impl FnMut() -> bool,
) -> Result<(), NotReady> {
    loop {
        if ready() {
            return Ok(());
        }
        if let Some(status) = group.exited() {
            return Err(NotReady::Exited(status));
        }
        if Instant::now() > deadline {
            return Err(NotReady::TimedOut);
        }
        std::thread::sleep(every);
    }
}

/// Kills `$2`'s process group once process `$1` is gone, then removes
/// directory `$3` if given (a broker kept in a `static` is never dropped).
const WATCHDOG: &str = r#"
parent=$1 group=$2 dir=$3
while kill -0 "$parent" 2>/dev/null; do sleep 1; done
kill -KILL -"$group" 2>/dev/null
if [ -n "$dir" ]; then sleep 1; rm -rf "$dir"; fi
exit 0
"#;

/// A child process in a process group of its own, with a watchdog that
/// kills the group if the test process dies.
#[derive(Debug)]
pub(crate) struct Group {
    child: Child,
    watchdog: Option<Child>,
}

impl Group {
    /// Spawns `cmd` as the leader of a new process group.
    pub(crate) fn spawn(cmd: Command) -> io::Result<Group> {
        Group::spawn_cleaning(cmd, None)
    }

    /// [`Group::spawn`]; if the test process dies, the watchdog also removes
    /// `dir`.
    pub(crate) fn spawn_cleaning(mut cmd: Command, dir: Option<&Path>) -> io::Result<Group> {
        cmd.process_group(0).stdin(Stdio::null());
        let child = cmd.spawn()?;
        let watchdog = Command::new("sh")
            .arg("-c")
            .arg(WATCHDOG)
            .arg("outbox-broker-watchdog")
            .arg(std::process::id().to_string())
            .arg(child.id().to_string())
            .arg(dir.map(|d| d.as_os_str().to_owned()).unwrap_or_default())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .ok();
        Ok(Group { child, watchdog })
    }

    /// The group leader's exit status, if it has exited.
    pub(crate) fn exited(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// Sends `signal` to the whole group.
    pub(crate) fn signal(&self, signal: libc::c_int) {
        // SAFETY: killpg only sends a signal, to the group this handle
        // created.
        unsafe {
            libc::killpg(self.child.id() as libc::pid_t, signal);
        }
    }

    /// Kills the whole group (`SIGKILL`) and reaps the leader.
    pub(crate) fn kill(&mut self) {
        let group = self.child.id() as libc::pid_t;
        // SAFETY: killpg only sends a signal; the group is the one this
        // handle created and whose leader it has not reaped yet (or has, in
        // which case the call fails harmlessly with ESRCH).
        unsafe {
            libc::killpg(group, libc::SIGKILL);
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        if let Some(mut w) = self.watchdog.take() {
            let _ = w.kill();
            let _ = w.wait();
        }
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The last `n` lines of a file, or a note that it could not be read.
/// Runs `start` unless [`SKIP_ENV`] names `broker`, in which case it says so
/// on stderr and returns `None`.
///
/// # Panics
///
/// If the broker cannot be started (the message says what is missing).
pub(crate) fn start_or_skip<T>(
    broker: &str,
    start: impl FnOnce() -> Result<T, BrokerError>,
) -> Option<T> {
    if skipped(broker) {
        eprintln!("skipped: {SKIP_ENV} names {broker}");
        return None;
    }
    match start() {
        Ok(b) => Some(b),
        Err(e) => panic!("{e}"),
    }
}

pub(crate) fn tail(path: &Path, n: usize) -> String {
    match fs::read(path) {
        Ok(bytes) => {
            let text = String::from_utf8_lossy(&bytes);
            let lines: Vec<&str> = text.lines().collect();
            lines[lines.len().saturating_sub(n)..].join("\n")
        }
        Err(e) => format!("(cannot read {}: {e})", path.display()),
    }
}

/// The first of `candidates` that is an executable file, else `program` on
/// `PATH`.
pub(crate) fn find_program(candidates: &[PathBuf], program: &str) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let executable = |p: &Path| {
        fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    if let Some(found) = candidates.iter().find(|p| executable(p)) {
        return Some(found.clone());
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(program))
        .find(|p| executable(p))
}
