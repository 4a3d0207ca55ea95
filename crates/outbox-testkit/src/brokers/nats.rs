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
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use super::{log_to, temp_dir, BrokerError};
use crate::process::{
    connect_local, find_program, free_port, tail_file, Group, NotReady, Signal, Watchdog,
};

/// The name [`super::skipped`] knows this broker by.
pub const NAME: &str = "nats";

/// Environment variable naming the `nats-server` binary to run.
pub const SERVER_ENV: &str = "OUTBOX_NATS_SERVER";

/// The server's `max_payload` (its default, 1 MiB): a larger message,
/// headers included, is refused.
pub const MAX_PAYLOAD_BYTES: usize = 1024 * 1024;

/// How long a start may take.
const READY_TIMEOUT: Duration = Duration::from_secs(30);

/// What nats-server logs once it accepts clients.
const READY_LINE: &str = "Server is ready";

/// A running (or stopped) NATS server; killed on drop.
#[derive(Debug)]
pub struct Nats {
    dir: tempfile::TempDir,
    server: PathBuf,
    port: u16,
    auth: Option<(String, String)>,
    broker: Option<Group>,
    last_start: Duration,
}

impl Nats {
    /// Starts a server with JetStream and waits until it greets clients
    /// with JetStream enabled.
    pub fn start() -> Result<Nats, BrokerError> {
        Self::start_inner(None)
    }

    /// [`Nats::start`], with every client required to log in as `user`
    /// with `password`.
    pub fn start_with_user(user: &str, password: &str) -> Result<Nats, BrokerError> {
        Self::start_inner(Some((user.to_owned(), password.to_owned())))
    }

    fn start_inner(auth: Option<(String, String)>) -> Result<Nats, BrokerError> {
        let server = find_program(
            &[
                std::env::var_os(SERVER_ENV)
                    .map(PathBuf::from)
                    .unwrap_or_default(),
                PathBuf::from("/usr/sbin/nats-server"),
            ],
            "nats-server",
        )
        .ok_or_else(|| BrokerError::NotInstalled {
            broker: NAME,
            hint: format!(
                "no nats-server found (looked at ${SERVER_ENV}, /usr/sbin/nats-server, PATH); \
                 install it: apt-get install nats-server"
            ),
        })?;
        let mut nats = Nats {
            dir: temp_dir(NAME)?,
            server,
            port: free_port(),
            auth,
            broker: None,
            last_start: Duration::ZERO,
        };
        // A port found free can be taken by another server starting at
        // the same moment (tests start several): then try another one.
        let mut tries = 0;
        loop {
            match nats.start_again() {
                Err(BrokerError::Start { tail, .. })
                    if tries < 3 && tail.to_lowercase().contains("address already in use") =>
                {
                    tries += 1;
                    nats.port = free_port();
                }
                other => break other?,
            }
        }
        Ok(nats)
    }

    /// [`Nats::start`] unless [`super::SKIP_ENV`] names `nats`, in which
    /// case it says so on stderr and returns `None`.
    ///
    /// # Panics
    ///
    /// If the server cannot be started (the message says what is missing).
    pub fn start_or_skip() -> Option<Nats> {
        super::start_or_skip(NAME, Nats::start)
    }

    /// `nats://127.0.0.1:PORT` (no credentials, even if the server wants
    /// some).
    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    /// The client port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// How long the last start took until the server greeted a client.
    pub fn last_start_duration(&self) -> Duration {
        self.last_start
    }

    /// The server's log file.
    pub fn log_path(&self) -> PathBuf {
        self.dir.path().join("server.log")
    }

    /// Whether the server process is running.
    pub fn is_running(&mut self) -> bool {
        self.broker.as_mut().is_some_and(|g| g.exited().is_none())
    }

    /// Kills the server (`SIGKILL`, as a crash would). Its JetStream store
    /// stays for [`Nats::start_again`].
    pub fn stop(&mut self) {
        if let Some(mut g) = self.broker.take() {
            g.kill();
        }
    }

    /// Freezes the server (`SIGSTOP`): connections stay open but nothing
    /// is read or answered, as with a hung host.
    pub fn freeze(&self) {
        if let Some(g) = &self.broker {
            g.signal(Signal::Stop);
        }
    }

    /// Lets a [frozen](Nats::freeze) server run again (`SIGCONT`).
    pub fn thaw(&self) {
        if let Some(g) = &self.broker {
            g.signal(Signal::Cont);
        }
    }

    /// Starts the server again on the same port with the same store, and
    /// waits until it greets clients with JetStream enabled.
    pub fn start_again(&mut self) -> Result<(), BrokerError> {
        self.stop();
        let started = Instant::now();
        let log = self.log_path();
        let base = self.dir.path();
        let (out, err) = log_to(NAME, &log)?;
        let mut cmd = Command::new(&self.server);
        cmd.current_dir(base)
            .arg("-js")
            .args(["-a", "127.0.0.1"])
            .args(["-p", &self.port.to_string()])
            .arg("-sd")
            .arg(base.join("jetstream"));
        if let Some((user, password)) = &self.auth {
            cmd.args(["--user", user, "--pass", password]);
        }
        cmd.stdout(out).stderr(err);
        let watchdog = Watchdog::kill_group().removing(base);
        let group = self
            .broker
            .insert(Group::spawn(cmd, &watchdog).map_err(BrokerError::io(
                NAME,
                format!("running {}", self.server.display()),
            ))?);
        let port = self.port;
        // Its own log says it listens: another server that took the port
        // first would answer the probe too.
        let waited = group.wait_ready(started + READY_TIMEOUT, Duration::from_millis(20), || {
            std::fs::read_to_string(&log).is_ok_and(|l| l.contains(READY_LINE))
                && jetstream_ready(port)
        });
        let reason = match waited {
            Ok(()) => {
                self.last_start = started.elapsed();
                return Ok(());
            }
            Err(NotReady::Exited(status)) => format!("nats-server exited with {status}"),
            Err(NotReady::TimedOut) => format!(
                "no INFO with JetStream enabled on 127.0.0.1:{port} within {READY_TIMEOUT:?}"
            ),
        };
        let e = BrokerError::Start {
            broker: NAME,
            reason,
            log: self.log_path().display().to_string(),
            tail: tail_file(&self.log_path(), 30),
        };
        self.stop();
        Err(e)
    }

    /// The directory holding the server's store and log.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for Nats {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Whether a NATS server on `port` greets a client with an `INFO` that
/// says JetStream is enabled (it is, once the store has been recovered).
fn jetstream_ready(port: u16) -> bool {
    let Some(stream) = connect_local(port) else {
        return false;
    };
    let mut line = String::new();
    if BufReader::new(stream).read_line(&mut line).is_err() {
        return false;
    }
    line.starts_with("INFO ") && line.contains("\"jetstream\":true")
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
