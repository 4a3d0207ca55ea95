//! The cluster's lifecycle: start, stop, restart, kill, drop.

use std::fs;
use std::path::Path;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use crate::launch::{Launcher, Retry, Server, READY_TIMEOUT};
use crate::process::{free_port, Signal};
use crate::run_as::RunAs;
use crate::{find_bin_dir, PgError, PgOptions, SUPERUSER};

/// How long a fast shutdown may take before the postmaster is killed.
const STOP_TIMEOUT: Duration = Duration::from_secs(10);

/// How many ports a fresh start tries when the chosen one turns out taken.
const PORT_ATTEMPTS: usize = 5;

/// How long a restart waits before trying again while a killed
/// predecessor's processes still hold the data directory or the port.
const RESTART_RETRY: Duration = Duration::from_millis(100);

/// A running throwaway PostgreSQL cluster.
///
/// It listens on `127.0.0.1` on [`port`](Self::port), trusts every
/// connection, and has the superuser `postgres`. Dropping it stops the
/// server (fast shutdown, `SIGKILL` after ten seconds) and deletes its
/// temporary directory, unless [`PgOptions::keep_on_drop`] is set.
#[derive(Debug)]
pub struct PgCluster {
    launcher: Launcher,
    port: u16,
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
        let run_as = RunAs::needed()?;
        let base_dir = tempfile::Builder::new()
            .prefix("outbox-pg-")
            .tempdir()
            .map_err(|e| PgError::io("creating a temporary directory for postgres", e))?
            .keep();
        // From here on, dropping `cluster` removes `base_dir` again.
        let mut cluster = PgCluster {
            launcher: Launcher::new(bin_dir, base_dir, opts, run_as),
            port: 0,
            server: Mutex::new(None),
        };
        if let Some(run_as) = &cluster.launcher.run_as {
            run_as.hand_over(&cluster.launcher.base_dir)?;
        }
        cluster.launcher.initdb()?;

        let mut last = None;
        for _ in 0..PORT_ATTEMPTS {
            let port = free_port();
            let deadline = Instant::now() + READY_TIMEOUT;
            match cluster.launcher.launch(port, deadline) {
                Ok(server) => {
                    cluster.port = port;
                    cluster.set_server(server);
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
        &self.launcher.data_dir
    }

    /// The file the server logs to; it sits next to the data directory.
    pub fn log_path(&self) -> &Path {
        &self.launcher.log_path
    }

    /// Stops the server with a fast shutdown (`SIGINT`), keeping the data
    /// directory so that [`restart`](Self::restart) can start it again.
    ///
    /// Waits for the server to exit; after ten seconds it is killed. Does
    /// nothing if the server is not running.
    pub fn stop(&mut self) -> Result<(), PgError> {
        self.shut_down(Signal::Int)
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
            match self.launcher.launch(self.port, deadline) {
                Ok(server) => {
                    self.set_server(server);
                    return Ok(());
                }
                // Right after a kill, the old server's children may still hold
                // its shared memory or port for a moment.
                Err(failure) if failure.retry != Retry::No && Instant::now() < deadline => {
                    std::thread::sleep(RESTART_RETRY);
                }
                Err(failure) => return Err(failure.into_error(self.port)),
            }
        }
    }

    /// Kills the postmaster with `SIGKILL`, as in a crash, keeping the data
    /// directory; [`restart`](Self::restart) then performs crash recovery.
    ///
    /// Returns once the postmaster is gone; its backends are killed with
    /// it. Does nothing if the server is not running.
    pub fn kill(&mut self) {
        // `shut_down` already escalates to killing the server's whole
        // process group; if even that fails there is nothing left to try.
        let _ = self.shut_down(Signal::Kill);
    }

    /// Whether the server process is running.
    pub fn is_running(&self) -> bool {
        let mut server = self.server.lock().unwrap_or_else(PoisonError::into_inner);
        server
            .as_mut()
            .is_some_and(|server| server.group.exited().is_none())
    }

    fn set_server(&mut self, server: Server) {
        *self
            .server
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner) = Some(server);
    }

    /// Sends the postmaster `signal` and waits for it to exit, killing it
    /// after [`STOP_TIMEOUT`]. The server's process group goes with it.
    fn shut_down(&mut self, signal: Signal) -> Result<(), PgError> {
        let Some(mut server) = self
            .server
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
        else {
            return Ok(());
        };
        if server.group.exited().is_some() {
            return Ok(());
        }
        let pid = server.postmaster_pid;
        signal.send(pid);
        if server.group.wait_exit(STOP_TIMEOUT) {
            return Ok(());
        }
        Signal::Kill.send(pid);
        if server.group.wait_exit(STOP_TIMEOUT) {
            return Ok(());
        }
        server.group.kill();
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
        if !self.launcher.opts.keep_on_drop {
            let _ = fs::remove_dir_all(&self.launcher.base_dir);
        }
    }
}
