//! Real brokers for tests, started from the system's binaries on free ports
//! of `127.0.0.1`: [`rabbitmq::RabbitMq`] (`rabbitmq-server`),
//! [`kafka::Tansu`] (a Kafka-protocol broker), [`nats::Nats`]
//! (`nats-server -js`), [`redis::Redis`] (`redis-server`) and
//! [`moto::Moto`] (moto's server, standing in for Amazon SQS and SNS).
//!
//! Each is one [`server::Server`], the launcher they share: it finds the
//! program, gives the broker a temporary directory and a free port (another
//! one if that is taken meanwhile), waits until the broker is ready, and
//! stops, freezes, thaws and restarts it. What is a broker's own (its
//! program, command line, readiness probe, options such as a password, and
//! processes it needs beside it) is its [`server::Launch`], in its module,
//! with helpers for reading messages back.
//!
//! A publisher's tests hold a broker as a [`Broker`]: one shared by the
//! tests of a binary, or a test's own for the cases that stop it.
//!
//! Every broker runs in its own process [group](crate::process::Group),
//! killed when its handle is dropped; a small `sh`
//! [watchdog](crate::process::Watchdog) also kills the group within about a
//! second after the test process dies, even by `SIGKILL`.
//!
//! A test that needs a broker that cannot be started fails, saying what is
//! missing, unless [`SKIP_ENV`] names that broker (see [`skipped`]).

pub mod kafka;
pub mod moto;
pub mod nats;
pub mod rabbitmq;
pub mod redis;
pub mod server;
mod shared;

pub use shared::{Address, Broker, SharedCell};

use std::io;
use std::path::Path;
use std::process::Stdio;

pub use crate::process::free_port;
use crate::process::{child_outputs, LogMode};

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
    child_outputs(path, LogMode::Truncate).map_err(BrokerError::io(
        broker,
        format!("creating {}", path.display()),
    ))
}

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

/// Runs `start` on a blocking thread unless [`SKIP_ENV`] names `broker`:
/// for a test that starts a broker with options of its own (a password).
///
/// # Panics
///
/// If the broker cannot be started (the message says what is missing).
pub async fn start_blocking_or_skip<T: Send + 'static>(
    broker: &'static str,
    start: impl FnOnce() -> Result<T, BrokerError> + Send + 'static,
) -> Option<T> {
    tokio::task::spawn_blocking(move || start_or_skip(broker, start))
        .await
        .unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()))
}
