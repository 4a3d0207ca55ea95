//! A throwaway NATS server with JetStream.
//!
//! [`Nats::start`] runs `nats-server -js` on a free port of `127.0.0.1`,
//! with its JetStream store in a temporary directory, so streams and their
//! messages survive a [`Nats::stop`] and [`Nats::start_again`]. Starting
//! takes well under a second. The server's `max_payload` is its default,
//! [`MAX_PAYLOAD_BYTES`].
//!
//! Install it with `apt-get install nats-server` (Debian, Ubuntu); the
//! package may start a system instance, which these tests do not use.
//! `OUTBOX_NATS_SERVER` may name another `nats-server` binary.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::Command;

use super::server::{Launch, Program, Server};
use super::{Address, BrokerError};
use crate::process::connect_local;

/// The name [`super::skipped`] knows this broker by.
pub const NAME: &str = "nats";

/// Environment variable naming the `nats-server` binary to run.
pub const SERVER_ENV: &str = "OUTBOX_NATS_SERVER";

/// The server's `max_payload` (its default, 1 MiB): a larger message,
/// headers included, is refused.
pub const MAX_PAYLOAD_BYTES: usize = 1024 * 1024;

/// A running (or stopped) NATS server with JetStream; killed on drop. Its
/// JetStream store stays across [`Server::stop`] and [`Server::start_again`].
pub type Nats = Server<NatsServer>;

/// How a NATS server is run: `nats-server -js` on `127.0.0.1`, its store in
/// the server's directory, with the one login [`Nats::start_with_user`] set
/// (or none).
#[derive(Debug, Default)]
pub struct NatsServer {
    auth: Option<(String, String)>,
}

impl Launch for NatsServer {
    const NAME: &'static str = NAME;
    const PROGRAM: Program = Program::package(SERVER_ENV, "/usr/sbin/nats-server", "nats-server");
    const READY_LINE: Option<&'static str> = Some("Server is ready");
    const AWAITED: &'static str = "INFO with JetStream enabled";

    fn command(&self, cmd: &mut Command, dir: &Path, port: u16) {
        cmd.arg("-js")
            .args(["-a", "127.0.0.1"])
            .args(["-p", &port.to_string()])
            .arg("-sd")
            .arg(dir.join("jetstream"));
        if let Some((user, password)) = &self.auth {
            cmd.args(["--user", user, "--pass", password]);
        }
    }

    /// Whether a NATS server on `port` greets a client with an `INFO` that
    /// says JetStream is enabled (it is, once the store has been recovered).
    fn ready(port: u16) -> bool {
        let Some(stream) = connect_local(port) else {
            return false;
        };
        let mut line = String::new();
        if BufReader::new(stream).read_line(&mut line).is_err() {
            return false;
        }
        line.starts_with("INFO ") && line.contains("\"jetstream\":true")
    }
}

impl Nats {
    /// [`Nats::start`], with every client required to log in as `user`
    /// with `password`.
    pub fn start_with_user(user: &str, password: &str) -> Result<Nats, BrokerError> {
        Server::launch(NatsServer {
            auth: Some((user.to_owned(), password.to_owned())),
        })
    }
}

impl Address for NatsServer {
    /// `nats://127.0.0.1:PORT` (no credentials, even if the server wants
    /// some).
    fn url(server: &Nats) -> String {
        format!("nats://127.0.0.1:{}", server.port())
    }
}

/// Reading back from JetStream, for tests of the NATS publisher.
#[cfg(feature = "nats")]
pub mod client {
    use std::collections::BTreeMap;
    use std::time::{Duration, Instant};

    use async_nats::jetstream::{self, consumer, stream};
    use futures::StreamExt;

    /// One message read back from a stream.
    #[derive(Debug, Clone)]
    pub struct StoredMessage {
        /// The subject it was published to.
        pub subject: String,
        /// Its headers, each name with its first value.
        pub headers: BTreeMap<String, String>,
        /// Its body.
        pub payload: Vec<u8>,
        /// Its sequence number in the stream.
        pub sequence: u64,
    }

    /// A JetStream context on `url` (`nats://HOST:PORT`).
    ///
    /// # Panics
    ///
    /// If the server cannot be reached.
    pub async fn context(url: &str) -> jetstream::Context {
        let client = async_nats::connect(url)
            .await
            .unwrap_or_else(|e| panic!("connecting to nats at {url}: {e}"));
        jetstream::new(client)
    }

    /// Creates (or finds) the file-backed stream `name` capturing
    /// `subjects`.
    ///
    /// # Panics
    ///
    /// If the server refuses.
    pub async fn create_stream(js: &jetstream::Context, name: &str, subjects: &[String]) {
        js.get_or_create_stream(stream::Config {
            name: name.to_owned(),
            subjects: subjects.to_vec(),
            storage: stream::StorageType::File,
            ..Default::default()
        })
        .await
        .unwrap_or_else(|e| panic!("creating stream {name} for {subjects:?}: {e}"));
    }

    /// Reads stream `name` from its start with an ephemeral ordered
    /// consumer, in stream order, until `done` (called with each message
    /// read) says it has enough, or `deadline` passes.
    ///
    /// # Panics
    ///
    /// If the stream does not exist or the consumer cannot be created.
    pub async fn read_stream(
        js: &jetstream::Context,
        name: &str,
        deadline: Duration,
        mut done: impl FnMut(&StoredMessage) -> bool,
    ) -> Vec<StoredMessage> {
        let end = Instant::now() + deadline;
        let stream = js
            .get_stream(name)
            .await
            .unwrap_or_else(|e| panic!("finding stream {name}: {e}"));
        let consumer = stream
            .create_consumer(consumer::pull::OrderedConfig {
                deliver_policy: consumer::DeliverPolicy::All,
                ..Default::default()
            })
            .await
            .unwrap_or_else(|e| panic!("creating a consumer on {name}: {e}"));
        let mut messages = consumer
            .messages()
            .await
            .unwrap_or_else(|e| panic!("reading stream {name}: {e}"));
        let mut out = Vec::new();
        let mut enough = false;
        while !enough {
            let left = end.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            let next = tokio::time::timeout(left.min(Duration::from_millis(500)), messages.next());
            match next.await {
                Ok(Some(Ok(m))) => {
                    let sequence = m.info().map(|i| i.stream_sequence).unwrap_or_default();
                    let headers = m
                        .headers
                        .as_ref()
                        .map(|h| {
                            h.iter()
                                .filter_map(|(k, v)| {
                                    Some((k.to_string(), v.first()?.as_str().to_owned()))
                                })
                                .collect()
                        })
                        .unwrap_or_default();
                    let m = StoredMessage {
                        subject: m.subject.to_string(),
                        headers,
                        payload: m.payload.to_vec(),
                        sequence,
                    };
                    enough = done(&m);
                    out.push(m);
                }
                Ok(Some(Err(e))) => panic!("reading stream {name}: {e}"),
                Ok(None) | Err(_) => {}
            }
        }
        out
    }
}
