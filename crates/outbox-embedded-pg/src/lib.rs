//! A throwaway PostgreSQL cluster, for tests and demos.
//!
//! [`PgCluster::start`] runs `initdb` into a fresh temporary directory and
//! starts a `postgres` server on a free port of `127.0.0.1`, with durability
//! switched off for speed (see [`PgOptions::fsync`]). Dropping the
//! [`PgCluster`] stops the server and deletes the directory.
//!
//! | concept | file |
//! |---|---|
//! | the cluster's lifecycle: start, stop, restart, kill, drop | `cluster.rs` |
//! | one start of the server, and why it failed | `launch.rs` |
//! | is the server ready: `postmaster.pid` and a protocol probe | `ready.rs` |
//! | where the binaries are | `bin_dir.rs` |
//! | running as root | `run_as.rs` |
//! | settings, errors | `options.rs`, `error.rs` |
//! | process groups, the watchdog, logs, programs, ports | [`process`] |
//!
//! # Where the binaries come from
//!
//! See [`find_bin_dir`]: `OUTBOX_PG_BIN_DIR`, then `pg_config --bindir`,
//! then `initdb` on `PATH`, then the newest `/usr/lib/postgresql/*/bin`.
//!
//! # Running as root
//!
//! `initdb` and `postgres` refuse to run as root. When the process is root,
//! both are run as the `postgres` user through `runuser`, and the cluster's
//! directory is handed to that user.
//!
//! # Orphan safety
//!
//! The server runs in a process group of its own, under a small `sh`
//! [watchdog](process::Watchdog). When the process that started the cluster
//! is gone (it exited, panicked or was killed, even with `SIGKILL`) and has
//! been reaped by its parent, the watchdog shuts the server down (immediate
//! shutdown, then `SIGKILL` to what is left after ten seconds) within about
//! a second and deletes the cluster's directory (unless
//! [`PgOptions::keep_on_drop`]). This is also how a cluster that is never
//! dropped, such as one kept in a `static`, is cleaned up.
#![deny(unsafe_code)]
#![deny(missing_docs)]

mod bin_dir;
mod cluster;
mod error;
mod launch;
mod options;
pub mod process;
mod ready;
mod run_as;

pub use bin_dir::{find_bin_dir, BIN_DIR_ENV};
pub use cluster::PgCluster;
pub use error::PgError;
pub use options::PgOptions;
pub use process::free_port;

/// The database superuser created by `initdb` (`-U`), and the database
/// [`PgCluster::url`] points at.
const SUPERUSER: &str = "postgres";
