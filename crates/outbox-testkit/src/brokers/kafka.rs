//! A throwaway Kafka-protocol broker: [tansu](https://crates.io/crates/tansu)
//! with in-memory storage, listening on a free port of `127.0.0.1`.
//!
//! Build it once (about 13 minutes on 2 cores):
//! `cargo install tansu --version '^0.6' --locked --features dynostore --root /opt/tansu`,
//! then point [`BIN_ENV`] at `/opt/tansu/bin/tansu` (or put it on `PATH`).
//! Its storage is memory: a restarted broker starts empty.
//!
//! (Tests that only need the Kafka protocol can use librdkafka's built-in
//! mock cluster instead, which needs nothing installed.)

use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use super::{log_to, temp_dir, BrokerError};
use crate::process::{
    connect_local, find_program, free_port, tail_file, Group, NotReady, Watchdog,
};

/// The name [`super::skipped`] knows this broker by.
pub const NAME: &str = "kafka-real";

/// Environment variable naming the `tansu` binary.
pub const BIN_ENV: &str = "OUTBOX_TANSU_BIN";

/// How long a start may take.
const READY_TIMEOUT: Duration = Duration::from_secs(60);

/// A running (or stopped) tansu broker; killed on drop.
#[derive(Debug)]
pub struct Tansu {
    dir: tempfile::TempDir,
    bin: PathBuf,
    port: u16,
    broker: Option<Group>,
    last_start: Duration,
}

impl Tansu {
    /// Starts a broker and waits until it answers a Kafka `ApiVersions`
    /// request.
    pub fn start() -> Result<Tansu, BrokerError> {
        let bin = find_program(
            &[std::env::var_os(BIN_ENV)
                .map(PathBuf::from)
                .unwrap_or_default()],
            "tansu",
        )
        .ok_or_else(|| BrokerError::NotInstalled {
            broker: NAME,
            hint: format!(
                "no tansu binary (looked at ${BIN_ENV} and PATH); build one with \
                 `cargo install tansu --version '^0.6' --locked --features dynostore --root DIR` \
                 and set {BIN_ENV}=DIR/bin/tansu"
            ),
        })?;
        let dir = temp_dir(NAME)?;
        let mut tansu = Tansu {
            dir,
            bin,
            port: free_port(),
            broker: None,
            last_start: Duration::ZERO,
        };
        tansu.start_again()?;
        Ok(tansu)
    }

    /// [`Tansu::start`] unless [`super::SKIP_ENV`] names `kafka-real`, in
    /// which case it says so on stderr and returns `None`.
    ///
    /// # Panics
    ///
    /// If the broker cannot be started (the message says what is missing).
    pub fn start_or_skip() -> Option<Tansu> {
        super::start_or_skip(NAME, Tansu::start)
    }

    /// `127.0.0.1:PORT`, for `bootstrap.servers`.
    pub fn bootstrap(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// How long the last start took until the broker answered.
    pub fn last_start_duration(&self) -> Duration {
        self.last_start
    }

    /// Kills the broker. Its storage is memory: everything is lost.
    pub fn stop(&mut self) {
        if let Some(mut g) = self.broker.take() {
            g.kill();
        }
    }

    /// Starts the broker again on the same port (empty).
    pub fn start_again(&mut self) -> Result<(), BrokerError> {
        self.stop();
        let started = Instant::now();
        let log = self.dir.path().join("tansu.log");
        let (out, err) = log_to(NAME, &log)?;
        let url = format!("tcp://127.0.0.1:{}", self.port);
        let mut cmd = Command::new(&self.bin);
        cmd.arg("broker")
            .arg("--listener-url")
            .arg(&url)
            .arg("--advertised-listener-url")
            .arg(&url)
            .arg("--storage-engine")
            .arg("memory://tansu/")
            .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
            .env("RUST_LOG", "warn")
            .current_dir(self.dir.path())
            .stdout(out)
            .stderr(err);
        let watchdog = Watchdog::kill_group().removing(self.dir.path());
        let group = self
            .broker
            .insert(Group::spawn(cmd, &watchdog).map_err(BrokerError::io(NAME, "running tansu"))?);
        let port = self.port;
        let waited = group.wait_ready(started + READY_TIMEOUT, Duration::from_millis(20), || {
            kafka_ready(port)
        });
        let reason = match waited {
            Ok(()) => {
                self.last_start = started.elapsed();
                return Ok(());
            }
            Err(NotReady::Exited(status)) => format!("tansu exited with {status}"),
            Err(NotReady::TimedOut) => {
                format!("no ApiVersions answer on 127.0.0.1:{port} within {READY_TIMEOUT:?}")
            }
        };
        self.stop();
        Err(BrokerError::Start {
            broker: NAME,
            reason,
            log: log.display().to_string(),
            tail: tail_file(&log, 30),
        })
    }
}

impl Drop for Tansu {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Whether a Kafka broker on `port` answers `ApiVersions` (v0).
fn kafka_ready(port: u16) -> bool {
    let Some(mut stream) = connect_local(port) else {
        return false;
    };
    // api_key 18 (ApiVersions), version 0, correlation id 7, null client id.
    let body: [u8; 10] = [0, 18, 0, 0, 0, 0, 0, 7, 0xff, 0xff];
    let mut request = (body.len() as u32).to_be_bytes().to_vec();
    request.extend_from_slice(&body);
    if stream.write_all(&request).is_err() {
        return false;
    }
    let mut head = [0_u8; 8];
    if stream.read_exact(&mut head).is_err() {
        return false;
    }
    head[4..8] == [0, 0, 0, 7]
}
