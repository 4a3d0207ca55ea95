//! A throwaway Redis server.
//!
//! [`Redis::start`] runs `redis-server` on a free port of `127.0.0.1` with
//! its data in a temporary directory, the append-only file on and every
//! write fsynced before it is answered (`--appendonly yes --appendfsync
//! always`, no RDB snapshots): what a client was told is written survives a
//! [`Redis::stop`] (a `SIGKILL`) and [`Redis::start_again`]. Starting takes
//! well under a second.
//!
//! Install it with `apt-get install redis-server` (Debian, Ubuntu); the
//! package may start a system instance, which these tests do not use.
//! `OUTBOX_REDIS_SERVER` may name another `redis-server` binary.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use super::{log_to, temp_dir, BrokerError};
use crate::process::{
    connect_local, find_program, free_port, tail_file, Group, NotReady, Signal, Watchdog,
};

/// The name [`super::skipped`] knows this broker by.
pub const NAME: &str = "redis";

/// Environment variable naming the `redis-server` binary to run.
pub const SERVER_ENV: &str = "OUTBOX_REDIS_SERVER";

/// How long a start may take.
const READY_TIMEOUT: Duration = Duration::from_secs(30);

/// What redis-server logs once it accepts clients.
const READY_LINE: &str = "Ready to accept connections";

/// A running (or stopped) Redis server; killed on drop.
#[derive(Debug)]
pub struct Redis {
    dir: tempfile::TempDir,
    server: PathBuf,
    port: u16,
    password: Option<String>,
    broker: Option<Group>,
    last_start: Duration,
}

impl Redis {
    /// Starts a server and waits until it answers `PING` (after loading
    /// its append-only file).
    pub fn start() -> Result<Redis, BrokerError> {
        Self::start_inner(None)
    }

    /// [`Redis::start`], with every client required to authenticate with
    /// `password` (`requirepass`).
    pub fn start_with_password(password: &str) -> Result<Redis, BrokerError> {
        Self::start_inner(Some(password.to_owned()))
    }

    fn start_inner(password: Option<String>) -> Result<Redis, BrokerError> {
        let server = find_program(
            &[
                std::env::var_os(SERVER_ENV)
                    .map(PathBuf::from)
                    .unwrap_or_default(),
                PathBuf::from("/usr/bin/redis-server"),
            ],
            "redis-server",
        )
        .ok_or_else(|| BrokerError::NotInstalled {
            broker: NAME,
            hint: format!(
                "no redis-server found (looked at ${SERVER_ENV}, /usr/bin/redis-server, PATH); \
                 install it: apt-get install redis-server"
            ),
        })?;
        let mut redis = Redis {
            dir: temp_dir(NAME)?,
            server,
            port: free_port(),
            password,
            broker: None,
            last_start: Duration::ZERO,
        };
        // A port found free can be taken by another server starting at
        // the same moment (tests start several): then try another one.
        let mut tries = 0;
        loop {
            match redis.start_again() {
                Err(BrokerError::Start { tail, .. })
                    if tries < 3 && tail.to_lowercase().contains("address already in use") =>
                {
                    tries += 1;
                    redis.port = free_port();
                }
                other => break other?,
            }
        }
        Ok(redis)
    }

    /// [`Redis::start`] unless [`super::SKIP_ENV`] names `redis`, in which
    /// case it says so on stderr and returns `None`.
    ///
    /// # Panics
    ///
    /// If the server cannot be started (the message says what is missing).
    pub fn start_or_skip() -> Option<Redis> {
        super::start_or_skip(NAME, Redis::start)
    }

    /// `redis://127.0.0.1:PORT` (with `:PASSWORD@` if the server wants one).
    pub fn url(&self) -> String {
        match &self.password {
            Some(p) => format!("redis://:{p}@127.0.0.1:{}", self.port),
            None => format!("redis://127.0.0.1:{}", self.port),
        }
    }

    /// The port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// How long the last start took until the server answered `PING`.
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

    /// Kills the server (`SIGKILL`, as a crash would). Its append-only file
    /// stays for [`Redis::start_again`].
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

    /// Lets a [frozen](Redis::freeze) server run again (`SIGCONT`).
    pub fn thaw(&self) {
        if let Some(g) = &self.broker {
            g.signal(Signal::Cont);
        }
    }

    /// Starts the server again on the same port with the same data, and
    /// waits until it answers `PING`.
    pub fn start_again(&mut self) -> Result<(), BrokerError> {
        self.stop();
        let started = Instant::now();
        let log = self.log_path();
        let base = self.dir.path();
        let (out, err) = log_to(NAME, &log)?;
        let mut cmd = Command::new(&self.server);
        cmd.current_dir(base)
            .args(["--port", &self.port.to_string()])
            .args(["--bind", "127.0.0.1"])
            .arg("--dir")
            .arg(base)
            .args(["--appendonly", "yes"])
            .args(["--appendfsync", "always"])
            .args(["--save", ""])
            .args(["--daemonize", "no"])
            .args(["--logfile", ""]);
        if let Some(password) = &self.password {
            cmd.args(["--requirepass", password]);
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
            std::fs::read_to_string(&log).is_ok_and(|l| l.contains(READY_LINE)) && redis_ready(port)
        });
        let reason = match waited {
            Ok(()) => {
                self.last_start = started.elapsed();
                return Ok(());
            }
            Err(NotReady::Exited(status)) => format!("redis-server exited with {status}"),
            Err(NotReady::TimedOut) => {
                format!("no answer to PING on 127.0.0.1:{port} within {READY_TIMEOUT:?}")
            }
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

    /// The directory holding the server's data and log.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Whether a Redis server on `port` answers `PING` with `PONG`, or with
/// `NOAUTH` (it wants a password, and is otherwise ready); `LOADING` (still
/// reading its data) is not ready.
fn redis_ready(port: u16) -> bool {
    let Some(mut stream) = connect_local(port) else {
        return false;
    };
    if stream.write_all(b"PING\r\n").is_err() {
        return false;
    }
    let mut answer = [0_u8; 7];
    if stream.read_exact(&mut answer).is_err() {
        return false;
    }
    answer.starts_with(b"+PONG") || answer.starts_with(b"-NOAUTH")
}

/// Reading back from Redis, for tests of the Redis publisher.
#[cfg(feature = "redis")]
pub mod client {
    use std::collections::BTreeMap;

    use redis::aio::MultiplexedConnection;
    use redis::Value;

    /// One stream entry: its id and its fields, in the order stored.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct Entry {
        /// The entry id, `MILLIS-SEQ`.
        pub id: String,
        /// The fields, in the order they were added.
        pub fields: Vec<(String, Vec<u8>)>,
    }

    impl Entry {
        /// The value of `field` as bytes.
        pub fn get(&self, field: &str) -> Option<&[u8]> {
            self.fields
                .iter()
                .find(|(k, _)| k == field)
                .map(|(_, v)| v.as_slice())
        }

        /// The value of `field` as text (lossy).
        pub fn text(&self, field: &str) -> Option<String> {
            self.get(field)
                .map(|v| String::from_utf8_lossy(v).into_owned())
        }

        /// The fields as text, by name.
        pub fn map(&self) -> BTreeMap<String, String> {
            self.fields
                .iter()
                .map(|(k, v)| (k.clone(), String::from_utf8_lossy(v).into_owned()))
                .collect()
        }
    }

    /// A connection to `url`.
    ///
    /// # Panics
    ///
    /// If the server cannot be reached.
    pub async fn connect(url: &str) -> MultiplexedConnection {
        redis::Client::open(url)
            .unwrap_or_else(|e| panic!("redis url {url}: {e}"))
            .get_multiplexed_async_connection()
            .await
            .unwrap_or_else(|e| panic!("connecting to redis at {url}: {e}"))
    }

    /// Every entry of stream `key`, oldest first (`XRANGE key - +`, read
    /// in pages of 1,000); empty if the key does not exist.
    ///
    /// # Panics
    ///
    /// If Redis refuses (for example, `key` is not a stream).
    pub async fn read_stream(conn: &mut MultiplexedConnection, key: &str) -> Vec<Entry> {
        let mut out: Vec<Entry> = Vec::new();
        let mut start = "-".to_owned();
        loop {
            let page: Value = redis::cmd("XRANGE")
                .arg(key)
                .arg(&start)
                .arg("+")
                .arg("COUNT")
                .arg(1_000)
                .query_async(conn)
                .await
                .unwrap_or_else(|e| panic!("XRANGE {key}: {e}"));
            let entries = parse_entries(page);
            let n = entries.len();
            if let Some(last) = entries.last() {
                start = format!("({}", last.id);
            }
            out.extend(entries);
            if n < 1_000 {
                return out;
            }
        }
    }

    fn text(v: &Value) -> Vec<u8> {
        match v {
            Value::BulkString(b) => b.clone(),
            Value::SimpleString(s) => s.clone().into_bytes(),
            Value::VerbatimString { text, .. } => text.clone().into_bytes(),
            other => format!("{other:?}").into_bytes(),
        }
    }

    fn parse_entries(page: Value) -> Vec<Entry> {
        let Value::Array(items) = page else {
            panic!("XRANGE answered {page:?}");
        };
        items
            .into_iter()
            .map(|item| {
                let Value::Array(parts) = item else {
                    panic!("XRANGE entry {item:?}");
                };
                let [id, fields] = <[Value; 2]>::try_from(parts)
                    .unwrap_or_else(|p| panic!("XRANGE entry of {} parts", p.len()));
                let Value::Array(fields) = fields else {
                    panic!("XRANGE fields {fields:?}");
                };
                Entry {
                    id: String::from_utf8_lossy(&text(&id)).into_owned(),
                    fields: fields
                        .chunks(2)
                        .map(|kv| {
                            (
                                String::from_utf8_lossy(&text(&kv[0])).into_owned(),
                                kv.get(1).map(text).unwrap_or_default(),
                            )
                        })
                        .collect(),
                }
            })
            .collect()
    }
}
