//! What can go wrong starting, stopping or locating a server.

use std::io;
use std::path::PathBuf;
use std::process::ExitStatus;

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
        /// The last lines the server logged.
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
    pub(crate) fn io(context: impl Into<String>, source: io::Error) -> Self {
        PgError::Io {
            context: context.into(),
            source,
        }
    }
}
