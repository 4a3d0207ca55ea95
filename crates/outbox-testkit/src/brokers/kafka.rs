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

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use super::server::{ask, Launch, Program, Server};

/// The name [`super::skipped`] knows this broker by.
pub const NAME: &str = "kafka-real";

/// Environment variable naming the `tansu` binary.
pub const BIN_ENV: &str = "OUTBOX_TANSU_BIN";

/// A running (or stopped) tansu broker; killed on drop. Its storage is
/// memory: [`Server::start_again`] starts it empty.
pub type Tansu = Server<TansuServer>;

/// How tansu is run: `tansu broker` listening on, and advertising,
/// `127.0.0.1`, with in-memory storage.
#[derive(Debug, Default)]
pub struct TansuServer;

impl Launch for TansuServer {
    const NAME: &'static str = NAME;
    const PROGRAM: Program = Program {
        env: BIN_ENV,
        path: None,
        binary: "tansu",
        install: Some(
            "build one with \
                  `cargo install tansu --version '^0.6' --locked --features dynostore --root DIR` \
                  and set OUTBOX_TANSU_BIN=DIR/bin/tansu",
        ),
    };
    const OUTPUT: &'static str = "tansu.log";
    const AWAITED: &'static str = "ApiVersions answer";
    const READY_TIMEOUT: Duration = Duration::from_secs(60);

    fn command(&self, cmd: &mut Command, _dir: &Path, port: u16) {
        let url = format!("tcp://127.0.0.1:{port}");
        cmd.arg("broker")
            .arg("--listener-url")
            .arg(&url)
            .arg("--advertised-listener-url")
            .arg(&url)
            .arg("--storage-engine")
            .arg("memory://tansu/")
            .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
            .env("RUST_LOG", "warn");
    }

    /// Whether a Kafka broker on `port` answers `ApiVersions` (v0).
    fn ready(port: u16) -> bool {
        // api_key 18 (ApiVersions), version 0, correlation id 7, null client id.
        let body: [u8; 10] = [0, 18, 0, 0, 0, 0, 0, 7, 0xff, 0xff];
        let mut request = (body.len() as u32).to_be_bytes().to_vec();
        request.extend_from_slice(&body);
        ask::<8>(port, &request).is_some_and(|head| head[4..8] == [0, 0, 0, 7])
    }
}

impl Tansu {
    /// `127.0.0.1:PORT`, for `bootstrap.servers`.
    pub fn bootstrap(&self) -> String {
        format!("127.0.0.1:{}", self.port())
    }
}
