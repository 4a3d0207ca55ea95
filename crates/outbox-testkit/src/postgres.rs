//! Throwaway PostgreSQL clusters for tests.
//!
//! [`PgCluster::start`] runs `initdb` into a fresh temporary directory and
//! starts a `postgres` server on a free port of `127.0.0.1`, with durability
//! switched off for speed (see [`PgOptions::fsync`]). Dropping the
//! [`PgCluster`] stops the server and deletes the directory.
//!
//! [`test_db`] gives each test its own database: on the server named by
//! `DATABASE_URL` when that is set, otherwise on one throwaway cluster that
//! is shared by every test of the process.
//!
//! # Where the binaries come from
//!
//! See [`find_bin_dir`]: `OUTBOX_PG_BIN_DIR`, then `pg_config --bindir`,
//! then `initdb` on `PATH`, then the newest `/usr/lib/postgresql/*/bin`.
//!
//! # Running as root
//!
//! `initdb` and `postgres` refuse to run as root. When the test process is
//! root, both are run as the `postgres` user through `runuser`, and the
//! cluster's directory is handed to that user.
//!
//! # Orphan safety
//!
//! The server is started under a small `sh` watchdog. When the process that
//! started the cluster is gone (it exited, panicked or was killed, even with
//! `SIGKILL`) and has been reaped by its parent, the watchdog shuts the server
//! down (immediate shutdown) within about a second and deletes the cluster's
//! directory (unless [`PgOptions::keep_on_drop`]). This is also how the
//! cluster shared by [`test_db`], which is never dropped, is cleaned up.

use std::ffi::OsString;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use sqlx::postgres::{PgConnection, PgPool, PgPoolOptions};
use sqlx::{Connection, Executor};

/// Environment variable naming the directory that holds `initdb` and `postgres`.
pub const BIN_DIR_ENV: &str = "OUTBOX_PG_BIN_DIR";

/// Environment variable naming an existing server for [`test_db`].
pub const DATABASE_URL_ENV: &str = "DATABASE_URL";

/// The database superuser created by `initdb` (`-U`), and the database
/// [`PgCluster::url`] points at.
const SUPERUSER: &str = "postgres";

/// The operating-system user the server runs as when the test process is root.
const OS_USER: &str = "postgres";

/// How long a start (or restart) may take before it is given up.
const READY_TIMEOUT: Duration = Duration::from_secs(30);

/// How long a fast shutdown may take before the postmaster is killed.
const STOP_TIMEOUT: Duration = Duration::from_secs(10);

/// Interval between readiness and exit checks.
const POLL: Duration = Duration::from_millis(20);

/// How many ports a fresh start tries when the chosen one turns out taken.
const PORT_ATTEMPTS: usize = 5;

/// How many lines of the server log go into an error.
const LOG_TAIL_LINES: usize = 40;

/// The watchdog that runs the server.
///
/// Arguments: the pid of the process that owns the cluster, the cluster's
/// temporary directory, `1` to keep that directory when the owner disappears
/// (else `0`), the data directory, then the server command line.
///
/// It runs the server in the background and waits for it. A background
/// subshell polls the owner's pid; once the owner is gone it sends the
/// postmaster `SIGQUIT` (immediate shutdown), escalating to `SIGKILL` after
/// about ten seconds. When the server has exited and the owner is gone, the
/// watchdog deletes the temporary directory (unless told to keep it). When
/// the server exits while the owner is alive (`stop`, `kill`), the watchdog
/// just exits with the server's status.
const WATCHDOG: &str = r#"
parent=$1 base=$2 keep=$3 data=$4
shift 4
"$@" &
child=$!
(
  while kill -0 "$parent" 2>/dev/null; do sleep 0.5; done
  pm=$(head -n 1 "$data/postmaster.pid" 2>/dev/null)
  case $pm in
    '' | *[!0-9]*) pm=''; kill -TERM "$child" 2>/dev/null ;;
    *) kill -QUIT "$pm" 2>/dev/null ;;
  esac
  i=0
  while kill -0 "$child" 2>/dev/null; do
    i=$((i + 1))
    if [ "$i" -gt 20 ]; then
      if [ -n "$pm" ]; then kill -KILL "$pm" 2>/dev/null; fi
      kill -KILL "$child" 2>/dev/null
      break
    fi
    sleep 0.5
  done
) &
watcher=$!
wait "$child"
status=$?
if kill -0 "$parent" 2>/dev/null; then
  kill "$watcher" 2>/dev/null
else
  wait "$watcher"
  if [ "$keep" != 1 ]; then rm -rf "$base"; fi
fi
exit "$status"
"#;

/// Errors from starting, stopping or locating a PostgreSQL server.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PgError {
    /// No directory with `initdb` and `postgres` was found.
    #[error(
        "no postgresql server binaries (initdb, postgres) found; looked at {searched}. \
         install postgresql (debian/ubuntu: `apt-get install postgresql`; \
         macos: `brew install postgresql`), or set OUTBOX_PG_BIN_DIR to the directory \
         holding `initdb` and `postgres`, or set DATABASE_URL to use an existing server \
         for test databases"
    )]
    BinariesNotFound {
        /// The places that were looked at.
        searched: String,
    },

    /// `OUTBOX_PG_BIN_DIR` is set, but the directory lacks a needed program.
    #[error(
        "the directory in OUTBOX_PG_BIN_DIR ({}) has no executable `{program}`",
        .dir.display()
    )]
    BadBinDir {
        /// The directory named by `OUTBOX_PG_BIN_DIR`.
        dir: PathBuf,
        /// The program that is missing.
        program: &'static str,
    },

    /// The process is root and there is no `postgres` user to run the server as.
    #[error(
        "running as root, but there is no `postgres` user to run initdb and postgres as \
         (they refuse to run as root); install postgresql (which creates the user), \
         create it (`useradd --system --create-home postgres`), or run the tests as a \
         non-root user"
    )]
    NoPostgresUser,

    /// The process is root and `runuser` (util-linux) is not installed.
    #[error(
        "running as root, but `runuser` was not found; it is needed to run initdb and \
         postgres as the `postgres` user (debian/ubuntu: `apt-get install util-linux`), \
         or run the tests as a non-root user"
    )]
    NoRunuser,

    /// An operating-system call failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The underlying error.
        #[source]
        source: io::Error,
    },

    /// `initdb` failed.
    #[error("initdb failed ({status}):\n{output}")]
    Initdb {
        /// The exit status of `initdb`.
        status: ExitStatus,
        /// What `initdb` printed.
        output: String,
    },

    /// The server did not start, or did not accept connections in time.
    #[error(
        "postgres failed to start on port {port}: {reason}\n--- server log (tail) ---\n{log_tail}"
    )]
    Start {
        /// The port the server was to listen on.
        port: u16,
        /// What went wrong.
        reason: String,
        /// The last lines the server (and its watchdog) logged.
        log_tail: String,
    },

    /// The server did not stop, even after `SIGKILL`.
    #[error("postgres (postmaster pid {pid}) did not stop: {reason}")]
    Stop {
        /// The pid of the postmaster.
        pid: u32,
        /// What went wrong.
        reason: String,
    },
}

impl PgError {
    fn io(context: impl Into<String>, source: io::Error) -> Self {
        PgError::Io {
            context: context.into(),
            source,
        }
    }
}

/// Settings for [`PgCluster::start_with`].
///
/// Build it with struct-update syntax:
/// `PgOptions { fsync: true, ..PgOptions::default() }`.
#[derive(Debug, Clone)]
pub struct PgOptions {
    /// Keep PostgreSQL's durability settings (default `false`).
    ///
    /// When `false` the server runs with `fsync=off`,
    /// `synchronous_commit=off` and `full_page_writes=off`. Because of
    /// `synchronous_commit=off`, the last few hundred milliseconds of
    /// acknowledged commits can be lost when the server is killed
    /// ([`PgCluster::kill`]). Crash tests that must not lose acknowledged
    /// commits should add `("synchronous_commit", "on")` to
    /// [`extra_conf`](Self::extra_conf): that is enough against a killed
    /// server, since the operating system keeps what was written. `true`
    /// also guards against an operating-system crash, but makes crash
    /// recovery fsync the whole data directory (seconds).
    pub fsync: bool,
    /// `max_connections` (default 200).
    pub max_connections: u32,
    /// Further settings, passed as `-c name=value` after the built-in ones
    /// (so they override them).
    pub extra_conf: Vec<(String, String)>,
    /// Keep the cluster's directory when the [`PgCluster`] is dropped, or
    /// when the process that started it disappears (default `false`). The
    /// server is stopped either way.
    pub keep_on_drop: bool,
}

impl Default for PgOptions {
    fn default() -> Self {
        PgOptions {
            fsync: false,
            max_connections: 200,
            extra_conf: Vec::new(),
            keep_on_drop: false,
        }
    }
}

/// How to run a program as the `postgres` user when the process is root.
#[derive(Debug, Clone)]
struct RunAs {
    runuser: PathBuf,
}

/// A running server: its watchdog (our child) and the postmaster's pid.
#[derive(Debug)]
struct Server {
    watchdog: Child,
    postmaster_pid: u32,
}

/// A running throwaway PostgreSQL cluster.
///
/// It listens on `127.0.0.1` on [`port`](Self::port), trusts every
/// connection, and has the superuser `postgres`. Dropping it stops the
/// server (fast shutdown, `SIGKILL` after ten seconds) and deletes its
/// temporary directory, unless [`PgOptions::keep_on_drop`] is set.
#[derive(Debug)]
pub struct PgCluster {
    bin_dir: PathBuf,
    base_dir: PathBuf,
    data_dir: PathBuf,
    log_path: PathBuf,
    port: u16,
    opts: PgOptions,
    run_as: Option<RunAs>,
    server: Mutex<Option<Server>>,
}

impl PgCluster {
    /// Creates and starts a new cluster with [`PgOptions::default`].
    ///
    /// Blocks until the server accepts connections (about a second).
    pub fn start() -> Result<PgCluster, PgError> {
        Self::start_with(PgOptions::default())
    }

    /// Creates and starts a new cluster with the given options.
    ///
    /// Blocks until the server accepts connections, for at most 30 seconds.
    pub fn start_with(opts: PgOptions) -> Result<PgCluster, PgError> {
        let bin_dir = find_bin_dir()?;
        let run_as = if is_root() {
            Some(RunAs {
                runuser: find_runuser().ok_or(PgError::NoRunuser)?,
            })
        } else {
            None
        };
        let owner = match run_as {
            Some(_) => Some(lookup_user(OS_USER).ok_or(PgError::NoPostgresUser)?),
            None => None,
        };

        let base_dir = tempfile::Builder::new()
            .prefix("outbox-pg-")
            .tempdir()
            .map_err(|e| PgError::io("creating a temporary directory for postgres", e))?
            .keep();
        // From here on, dropping `cluster` removes `base_dir` again.
        let mut cluster = PgCluster {
            bin_dir,
            data_dir: base_dir.join("data"),
            log_path: base_dir.join("postgres.log"),
            base_dir,
            port: 0,
            opts,
            run_as,
            server: Mutex::new(None),
        };
        if let Some((uid, gid)) = owner {
            std::os::unix::fs::chown(&cluster.base_dir, Some(uid), Some(gid)).map_err(|e| {
                PgError::io(
                    format!(
                        "handing {} to the `{OS_USER}` user",
                        cluster.base_dir.display()
                    ),
                    e,
                )
            })?;
        }
        cluster.initdb()?;

        let mut last = None;
        for _ in 0..PORT_ATTEMPTS {
            let port = free_port();
            let deadline = Instant::now() + READY_TIMEOUT;
            match cluster.launch(port, deadline) {
                Ok(server) => {
                    cluster.port = port;
                    *cluster
                        .server
                        .get_mut()
                        .unwrap_or_else(PoisonError::into_inner) = Some(server);
                    return Ok(cluster);
                }
                Err(failure) if failure.retry != Retry::No => last = Some((port, failure)),
                Err(failure) => return Err(failure.into_error(port)),
            }
        }
        let (port, failure) = last.expect("at least one start attempt");
        Err(failure.into_error(port))
    }

    /// `postgres://postgres@127.0.0.1:PORT/postgres`.
    pub fn url(&self) -> String {
        self.url_for("postgres")
    }

    /// The URL of database `db` on this cluster, as the `postgres` superuser.
    pub fn url_for(&self, db: &str) -> String {
        format!("postgres://{SUPERUSER}@127.0.0.1:{}/{db}", self.port)
    }

    /// The TCP port the server listens on (on `127.0.0.1`).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The cluster's data directory (`PGDATA`).
    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    /// The file the server logs to; it sits next to the data directory.
    pub fn log_path(&self) -> &Path {
        &self.log_path
    }

    /// Stops the server with a fast shutdown (`SIGINT`), keeping the data
    /// directory so that [`restart`](Self::restart) can start it again.
    ///
    /// Waits for the server to exit; after ten seconds it is killed. Does
    /// nothing if the server is not running.
    pub fn stop(&mut self) -> Result<(), PgError> {
        self.shut_down("INT")
    }

    /// Starts the server again on the same port and data directory, after
    /// stopping it if it is running.
    ///
    /// After [`kill`](Self::kill) this performs crash recovery. Blocks until
    /// the server accepts connections, for at most 30 seconds.
    pub fn restart(&mut self) -> Result<(), PgError> {
        self.stop()?;
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            match self.launch(self.port, deadline) {
                Ok(server) => {
                    *self
                        .server
                        .get_mut()
                        .unwrap_or_else(PoisonError::into_inner) = Some(server);
                    return Ok(());
                }
                // Right after a kill, the old server's children may still hold
                // its shared memory or port for a moment.
                Err(failure) if failure.retry != Retry::No && Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(100));
                }
                Err(failure) => return Err(failure.into_error(self.port)),
            }
        }
    }

    /// Kills the postmaster with `SIGKILL`, as in a crash, keeping the data
    /// directory; [`restart`](Self::restart) then performs crash recovery.
    ///
    /// Returns once the postmaster is gone. Its backends notice and exit on
    /// their own shortly after. Does nothing if the server is not running.
    pub fn kill(&mut self) {
        // `shut_down` already escalates to killing the watchdog's whole
        // process group; if even that fails there is nothing left to try.
        let _ = self.shut_down("KILL");
    }

    /// Whether the server process is running.
    pub fn is_running(&self) -> bool {
        let mut server = self.server.lock().unwrap_or_else(PoisonError::into_inner);
        match server.as_mut() {
            Some(server) => matches!(server.watchdog.try_wait(), Ok(None)),
            None => false,
        }
    }

    /// A `Command` running `program` as the user the server runs as.
    fn command(&self, program: &Path) -> Command {
        let mut cmd = match &self.run_as {
            Some(run_as) => {
                let mut cmd = Command::new(&run_as.runuser);
                cmd.args(["-u", OS_USER, "--"]).arg(program);
                cmd
            }
            None => Command::new(program),
        };
        // The server user may not be able to enter the test's directory.
        cmd.current_dir(&self.base_dir).stdin(Stdio::null());
        cmd
    }

    fn initdb(&self) -> Result<(), PgError> {
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
        // Best effort: the log is for people debugging a failed test.
        if let Ok(mut log) = open_log(&self.log_path) {
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

    /// The `postgres` command line for `port`.
    fn server_args(&self, port: u16) -> Vec<OsString> {
        let mut args: Vec<OsString> = vec![
            self.bin_dir.join("postgres").into(),
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

    /// Starts the server on `port` under the watchdog and waits until it
    /// accepts connections.
    fn launch(&self, port: u16, deadline: Instant) -> Result<Server, Failure> {
        let log_start = fs::metadata(&self.log_path).map_or(0, |m| m.len());
        let log = open_log(&self.log_path).map_err(|e| Failure::io("opening the server log", e))?;
        let log2 = log
            .try_clone()
            .map_err(|e| Failure::io("opening the server log", e))?;

        let mut cmd = Command::new("sh");
        cmd.arg("-c")
            .arg(WATCHDOG)
            .arg("outbox-pg-watchdog")
            .arg(std::process::id().to_string())
            .arg(&self.base_dir)
            .arg(if self.opts.keep_on_drop { "1" } else { "0" })
            .arg(&self.data_dir);
        if let Some(run_as) = &self.run_as {
            cmd.arg(&run_as.runuser).args(["-u", OS_USER, "--"]);
        }
        cmd.args(self.server_args(port))
            .current_dir(&self.base_dir)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log2)
            // Keep terminal signals (Ctrl-C) and a test runner's signals to the
            // test's process group away from the server: the watchdog decides.
            .process_group(0);
        let mut watchdog = cmd
            .spawn()
            .map_err(|e| Failure::io("starting the postgres watchdog (sh)", e))?;

        loop {
            match watchdog.try_wait() {
                Ok(Some(status)) => {
                    let log = read_log_since(&self.log_path, log_start);
                    let retry = if log.contains("Address already in use")
                        || log.contains("could not create any TCP/IP sockets")
                    {
                        Retry::NewPort
                    } else if log.contains("pre-existing shared memory block")
                        || (log.contains("lock file") && log.contains("already exists"))
                    {
                        Retry::SamePort
                    } else {
                        Retry::No
                    };
                    return Err(Failure {
                        reason: format!("the server exited ({status})"),
                        log_tail: tail(&log),
                        retry,
                    });
                }
                Ok(None) => {}
                Err(e) => {
                    kill_group(&mut watchdog);
                    return Err(Failure::io("waiting for the postgres watchdog", e));
                }
            }
            // Like `pg_ctl start`, wait for the postmaster to report "ready" in
            // its pid file (probing earlier only fills the log with "the
            // database system is starting up"), then check that it accepts a
            // connection on the port. The file read before the probe may still
            // be a killed predecessor's, so the pid is read again after it.
            if postmaster_says_ready(&self.data_dir) && probe(port) {
                if let Some(postmaster_pid) = read_postmaster_pid(&self.data_dir) {
                    return Ok(Server {
                        watchdog,
                        postmaster_pid,
                    });
                }
            }
            if Instant::now() >= deadline {
                kill_group(&mut watchdog);
                return Err(Failure {
                    reason: format!(
                        "it did not accept connections within {} s",
                        READY_TIMEOUT.as_secs()
                    ),
                    log_tail: tail(&read_log_since(&self.log_path, log_start)),
                    retry: Retry::No,
                });
            }
            std::thread::sleep(POLL);
        }
    }

    /// Sends the postmaster `signal` and waits for it to exit, killing it
    /// after [`STOP_TIMEOUT`].
    fn shut_down(&mut self, signal: &str) -> Result<(), PgError> {
        let Some(mut server) = self
            .server
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
        else {
            return Ok(());
        };
        if let Ok(Some(_)) = server.watchdog.try_wait() {
            return Ok(());
        }
        let pid = server.postmaster_pid;
        send_signal(signal, &pid.to_string());
        if wait_exit(&mut server.watchdog, STOP_TIMEOUT) {
            return Ok(());
        }
        send_signal("KILL", &pid.to_string());
        if wait_exit(&mut server.watchdog, STOP_TIMEOUT) {
            return Ok(());
        }
        kill_group(&mut server.watchdog);
        Err(PgError::Stop {
            pid,
            reason: format!("still running {} s after SIGKILL", STOP_TIMEOUT.as_secs()),
        })
    }
}

impl Drop for PgCluster {
    fn drop(&mut self) {
        // `stop` falls back to SIGKILL; nothing more can be done here.
        let _ = self.stop();
        if !self.opts.keep_on_drop {
            let _ = fs::remove_dir_all(&self.base_dir);
        }
    }
}

/// Whether a failed start may succeed when tried again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Retry {
    /// The port was taken: try another one.
    NewPort,
    /// A previous server's processes still hold the data directory: wait.
    SamePort,
    /// Trying again will not help.
    No,
}

/// A failed start attempt.
#[derive(Debug)]
struct Failure {
    reason: String,
    log_tail: String,
    retry: Retry,
}

impl Failure {
    fn io(context: &str, e: io::Error) -> Self {
        Failure {
            reason: format!("{context}: {e}"),
            log_tail: String::new(),
            retry: Retry::No,
        }
    }

    fn into_error(self, port: u16) -> PgError {
        PgError::Start {
            port,
            reason: self.reason,
            log_tail: self.log_tail,
        }
    }
}

/// Returns a TCP port on `127.0.0.1` that was free a moment ago.
///
/// The port is found by binding port 0 and releasing it, so another process
/// can take it before it is used; [`PgCluster::start`] retries with a new
/// port when that happens.
///
/// # Panics
///
/// If no socket can be bound on `127.0.0.1`.
pub fn free_port() -> u16 {
    TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .and_then(|listener| listener.local_addr())
        .map(|addr| addr.port())
        .expect("binding a TCP socket on 127.0.0.1 to find a free port")
}

/// Finds the directory holding the PostgreSQL server binaries (`initdb`,
/// `postgres`).
///
/// In order: the `OUTBOX_PG_BIN_DIR` environment variable if set (an error if
/// it lacks either program); `pg_config --bindir` if `pg_config` is on `PATH`
/// and that directory has the programs; the directory of `initdb` on `PATH`
/// (following symlinks); the highest version in `/usr/lib/postgresql/*/bin`
/// (Debian and Ubuntu). If none fits, the error says what to install.
pub fn find_bin_dir() -> Result<PathBuf, PgError> {
    if let Some(dir) = std::env::var_os(BIN_DIR_ENV).filter(|d| !d.is_empty()) {
        let dir = PathBuf::from(dir);
        for program in ["initdb", "postgres"] {
            if !is_executable(&dir.join(program)) {
                return Err(PgError::BadBinDir { dir, program });
            }
        }
        return Ok(dir);
    }

    if let Ok(output) = Command::new("pg_config")
        .arg("--bindir")
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
    {
        if output.status.success() {
            let dir = PathBuf::from(String::from_utf8_lossy(&output.stdout).trim());
            if has_server(&dir) {
                return Ok(dir);
            }
        }
    }

    if let Some(initdb) = which("initdb") {
        let real = fs::canonicalize(&initdb).ok();
        for candidate in [real.as_deref(), Some(initdb.as_path())]
            .into_iter()
            .flatten()
            .filter_map(Path::parent)
        {
            if has_server(candidate) {
                return Ok(candidate.to_path_buf());
            }
        }
    }

    if let Some(dir) = newest_debian_bin_dir() {
        return Ok(dir);
    }

    Err(PgError::BinariesNotFound {
        searched: format!(
            "{BIN_DIR_ENV} (unset), `pg_config --bindir`, `initdb` on PATH, \
             /usr/lib/postgresql/*/bin"
        ),
    })
}

fn is_executable(path: &Path) -> bool {
    fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

fn has_server(dir: &Path) -> bool {
    is_executable(&dir.join("initdb")) && is_executable(&dir.join("postgres"))
}

fn which(program: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(program))
        .find(|candidate| is_executable(candidate))
}

/// The highest version's `bin` directory under `/usr/lib/postgresql`.
fn newest_debian_bin_dir() -> Option<PathBuf> {
    fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(Result::ok)
        .filter_map(|entry| {
            let name = entry.file_name().into_string().ok()?;
            let version = name
                .split('.')
                .map(str::parse::<u32>)
                .collect::<Result<Vec<_>, _>>()
                .ok()?;
            let bin = entry.path().join("bin");
            has_server(&bin).then_some((version, bin))
        })
        .max_by(|a, b| a.0.cmp(&b.0))
        .map(|(_, bin)| bin)
}

fn find_runuser() -> Option<PathBuf> {
    which("runuser").or_else(|| {
        ["/usr/sbin/runuser", "/sbin/runuser"]
            .into_iter()
            .map(PathBuf::from)
            .find(|p| is_executable(p))
    })
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions, cannot fail and touches no memory.
    unsafe { libc::geteuid() == 0 }
}

/// The uid and gid of user `name`, from `/etc/passwd` or else `id`.
fn lookup_user(name: &str) -> Option<(u32, u32)> {
    if let Ok(passwd) = fs::read_to_string("/etc/passwd") {
        for line in passwd.lines() {
            let fields: Vec<&str> = line.split(':').collect();
            if fields.len() >= 4 && fields[0] == name {
                if let (Ok(uid), Ok(gid)) = (fields[2].parse(), fields[3].parse()) {
                    return Some((uid, gid));
                }
            }
        }
    }
    let id = |flag: &str| -> Option<u32> {
        let output = Command::new("id")
            .args([flag, name])
            .stdin(Stdio::null())
            .stderr(Stdio::null())
            .output()
            .ok()?;
        if !output.status.success() {
            return None;
        }
        String::from_utf8_lossy(&output.stdout).trim().parse().ok()
    };
    Some((id("-u")?, id("-g")?))
}

fn open_log(path: &Path) -> io::Result<File> {
    OpenOptions::new().create(true).append(true).open(path)
}

/// What the log gained after byte `start` (lossy UTF-8; empty if unreadable).
fn read_log_since(path: &Path, start: u64) -> String {
    let mut bytes = Vec::new();
    if let Ok(mut file) = File::open(path) {
        if file.seek(SeekFrom::Start(start)).is_ok() {
            let _ = file.read_to_end(&mut bytes);
        }
    }
    String::from_utf8_lossy(&bytes).into_owned()
}

/// The last [`LOG_TAIL_LINES`] lines of `log`.
fn tail(log: &str) -> String {
    let lines: Vec<&str> = log.lines().collect();
    let from = lines.len().saturating_sub(LOG_TAIL_LINES);
    let tail = lines[from..].join("\n");
    if tail.is_empty() {
        "(empty)".to_owned()
    } else {
        tail
    }
}

/// The postmaster's pid: the first line of `postmaster.pid`.
fn read_postmaster_pid(data_dir: &Path) -> Option<u32> {
    let text = fs::read_to_string(data_dir.join("postmaster.pid")).ok()?;
    text.lines().next()?.trim().parse().ok()
}

/// Whether `postmaster.pid` says the server is ready for connections (its
/// eighth line, written by PostgreSQL 10 and later). Always `true` for older
/// servers, which leaves the decision to [`probe`].
fn postmaster_says_ready(data_dir: &Path) -> bool {
    let major = fs::read_to_string(data_dir.join("PG_VERSION"))
        .ok()
        .and_then(|v| v.trim().split('.').next()?.parse::<u32>().ok());
    if major.is_some_and(|major| major < 10) {
        return true;
    }
    let Ok(text) = fs::read_to_string(data_dir.join("postmaster.pid")) else {
        return false;
    };
    text.lines()
        .nth(7)
        .is_some_and(|status| matches!(status.trim(), "ready" | "standby"))
}

/// Sends `signal` (a name such as `INT`) to `target` (a pid, or `-pgid` for
/// a process group). Failure means the target is already gone.
fn send_signal(signal: &str, target: &str) {
    let _ = Command::new("kill")
        .args(["-s", signal, "--", target])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}

/// Kills the watchdog's whole process group (the watchdog, `runuser` and the
/// postmaster) and reaps the watchdog.
fn kill_group(watchdog: &mut Child) {
    send_signal("KILL", &format!("-{}", watchdog.id()));
    let _ = watchdog.kill();
    let _ = watchdog.wait();
}

/// Waits up to `timeout` for `child` to exit; `true` if it did.
fn wait_exit(child: &mut Child, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        match child.try_wait() {
            Ok(Some(_)) | Err(_) => return true,
            Ok(None) if Instant::now() >= deadline => return false,
            Ok(None) => std::thread::sleep(POLL),
        }
    }
}

/// Whether a server on `127.0.0.1:port` accepts a connection as the
/// superuser, as `pg_isready` would report: connects, sends a startup
/// message and expects `AuthenticationOk` (the cluster trusts everyone).
/// While the server is starting up it answers with an error instead.
fn probe(port: u16) -> bool {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let Ok(mut stream) = TcpStream::connect_timeout(&addr, Duration::from_millis(500)) else {
        return false;
    };
    let timeout = Some(Duration::from_secs(2));
    if stream.set_read_timeout(timeout).is_err() || stream.set_write_timeout(timeout).is_err() {
        return false;
    }
    let mut body = 196_608_u32.to_be_bytes().to_vec(); // protocol 3.0
    for part in ["user", SUPERUSER, "database", "postgres", ""] {
        body.extend_from_slice(part.as_bytes());
        body.push(0);
    }
    let len = u32::try_from(body.len() + 4).expect("startup message is small");
    let mut message = len.to_be_bytes().to_vec();
    message.extend_from_slice(&body);
    if stream.write_all(&message).is_err() {
        return false;
    }
    // 'R', length 8, code 0 (AuthenticationOk).
    let mut reply = [0_u8; 9];
    if stream.read_exact(&mut reply).is_err() {
        return false;
    }
    let ready = reply == [b'R', 0, 0, 0, 8, 0, 0, 0, 0];
    if ready {
        // Terminate, politely.
        let _ = stream.write_all(&[b'X', 0, 0, 0, 4]);
    }
    ready
}

/// A database created for one test by [`test_db`].
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct TestDb {
    /// The database's connection URL.
    pub url: String,
    /// The database's name.
    pub name: String,
}

impl TestDb {
    /// A connection pool to the database (at most 10 connections).
    ///
    /// # Panics
    ///
    /// If the database cannot be reached.
    pub async fn pool(&self) -> PgPool {
        PgPoolOptions::new()
            .max_connections(10)
            .connect(&self.url)
            .await
            .unwrap_or_else(|e| {
                panic!(
                    "connecting a pool to test database {}: {e}",
                    redact(&self.url)
                )
            })
    }

    /// A single connection to the database.
    ///
    /// # Panics
    ///
    /// If the database cannot be reached.
    pub async fn connect(&self) -> PgConnection {
        PgConnection::connect(&self.url)
            .await
            .unwrap_or_else(|e| panic!("connecting to test database {}: {e}", redact(&self.url)))
    }
}

/// The cluster shared by [`test_db`], started on first use and kept for the
/// life of the process; its watchdog removes it after the process is gone.
static SHARED: OnceLock<Result<PgCluster, String>> = OnceLock::new();

fn shared_cluster() -> Result<&'static PgCluster, String> {
    SHARED
        .get_or_init(|| PgCluster::start().map_err(|e| e.to_string()))
        .as_ref()
        .map_err(Clone::clone)
}

/// Creates an empty database for one test and returns it.
///
/// If `DATABASE_URL` is set, the database is created on that server (which
/// must let that user `CREATE DATABASE`) and named `outbox_test_<hex>`; it is
/// not dropped afterwards. Otherwise it is created on a throwaway cluster
/// shared by all tests of the process, started on first use (about a
/// second), and named `t_<hex>`. Safe to call from any number of tests and
/// runtimes at once.
///
/// # Panics
///
/// With a message saying what failed, if the server cannot be started or
/// reached or the database cannot be created: this is for tests.
pub async fn test_db() -> TestDb {
    let suffix = format!("{:016x}", rand::random::<u64>());
    let (admin_url, name) = match std::env::var(DATABASE_URL_ENV) {
        Ok(url) if !url.trim().is_empty() => (url, format!("outbox_test_{suffix}")),
        _ => {
            let cluster = match SHARED.get() {
                Some(started) => started.as_ref().map_err(Clone::clone),
                // Starting blocks for a second: keep it off the async runtime.
                None => tokio::task::spawn_blocking(shared_cluster)
                    .await
                    .unwrap_or_else(|e| panic!("test_db: starting postgres panicked: {e}")),
            };
            let cluster = cluster.unwrap_or_else(|e| {
                panic!("test_db: could not start a throwaway postgresql cluster: {e}")
            });
            (cluster.url(), format!("t_{suffix}"))
        }
    };

    let shown = redact(&admin_url);
    let mut conn = PgConnection::connect(&admin_url).await.unwrap_or_else(|e| {
        panic!("test_db: could not connect to {shown} to create a test database: {e}")
    });
    conn.execute(format!("CREATE DATABASE \"{name}\"").as_str())
        .await
        .unwrap_or_else(|e| panic!("test_db: could not create database {name} on {shown}: {e}"));
    let _ = conn.close().await;

    TestDb {
        url: with_database(&admin_url, &name),
        name,
    }
}

/// [`test_db`] with the outbox migrated into its `public` schema, and a
/// pool on it.
pub async fn migrated_test_db() -> (TestDb, PgPool) {
    let db = test_db().await;
    let pool = db.pool().await;
    let mut conn = pool
        .acquire()
        .await
        .expect("a connection to the test database");
    outbox::migrate(&mut conn, &Default::default(), &Default::default())
        .await
        .unwrap_or_else(|e| panic!("migrating the test database: {e}"));
    drop(conn);
    (db, pool)
}

/// `url` with its database (path) replaced by `db`, keeping any query string.
fn with_database(url: &str, db: &str) -> String {
    let (base, query) = url.split_at(url.find('?').unwrap_or(url.len()));
    let authority_start = base.find("://").map_or(0, |i| i + 3);
    let base = match base[authority_start..].find('/') {
        Some(slash) => &base[..authority_start + slash],
        None => base,
    };
    format!("{base}/{db}{query}")
}

/// `url` with any password replaced by `***`, for messages.
fn redact(url: &str) -> String {
    let Some(scheme_end) = url.find("://").map(|i| i + 3) else {
        return url.to_owned();
    };
    let rest = &url[scheme_end..];
    let authority = &rest[..rest.find('/').unwrap_or(rest.len())];
    match (authority.rfind('@'), authority.find(':')) {
        (Some(at), Some(colon)) if colon < at => format!(
            "{}{}:***{}",
            &url[..scheme_end],
            &rest[..colon],
            &rest[at..]
        ),
        _ => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn with_database_replaces_the_path() {
        assert_eq!(
            with_database("postgres://u:p@h:5432/app", "t_1"),
            "postgres://u:p@h:5432/t_1"
        );
        assert_eq!(with_database("postgres://h", "t_1"), "postgres://h/t_1");
        assert_eq!(
            with_database("postgresql://h/app?sslmode=disable", "t_1"),
            "postgresql://h/t_1?sslmode=disable"
        );
        assert_eq!(
            with_database("postgres://h?sslmode=disable", "t_1"),
            "postgres://h/t_1?sslmode=disable"
        );
    }

    #[test]
    fn redact_hides_the_password() {
        assert_eq!(
            redact("postgres://u:secret@h:5432/app"),
            "postgres://u:***@h:5432/app"
        );
        assert_eq!(redact("postgres://u@h:5432/app"), "postgres://u@h:5432/app");
        assert_eq!(redact("postgres://h:5432/app"), "postgres://h:5432/app");
    }

    #[test]
    fn tail_keeps_the_last_lines() {
        let log: String = (0..100).map(|i| format!("line {i}\n")).collect();
        let t = tail(&log);
        assert!(t.starts_with("line 60\n"));
        assert!(t.ends_with("line 99"));
        assert_eq!(tail(""), "(empty)");
    }
}
