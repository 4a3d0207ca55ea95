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

use std::path::Path;
use std::process::Command;

use super::server::{ask, Launch, Program, Server};
use super::{Address, BrokerError};

/// The name [`super::skipped`] knows this broker by.
pub const NAME: &str = "redis";

/// Environment variable naming the `redis-server` binary to run.
pub const SERVER_ENV: &str = "OUTBOX_REDIS_SERVER";

/// A running (or stopped) Redis server; killed on drop. Its append-only
/// file stays across [`Server::stop`] and [`Server::start_again`].
pub type Redis = Server<RedisServer>;

/// How a Redis server is run: `redis-server` on `127.0.0.1`, its data in
/// the server's directory with every write fsynced before it is answered,
/// with the password [`Redis::start_with_password`] set (or none).
#[derive(Debug, Default)]
pub struct RedisServer {
    password: Option<String>,
}

impl Launch for RedisServer {
    const NAME: &'static str = NAME;
    const PROGRAM: Program = Program::package(SERVER_ENV, "/usr/bin/redis-server", "redis-server");
    const READY_LINE: Option<&'static str> = Some("Ready to accept connections");
    const AWAITED: &'static str = "answer to PING";

    fn command(&self, cmd: &mut Command, dir: &Path, port: u16) {
        cmd.args(["--port", &port.to_string()])
            .args(["--bind", "127.0.0.1"])
            .arg("--dir")
            .arg(dir)
            .args(["--appendonly", "yes"])
            .args(["--appendfsync", "always"])
            .args(["--save", ""])
            .args(["--daemonize", "no"])
            .args(["--logfile", ""]);
        if let Some(password) = &self.password {
            cmd.args(["--requirepass", password]);
        }
    }

    /// Whether a Redis server on `port` answers `PING` with `PONG`, or with
    /// `NOAUTH` (it wants a password, and is otherwise ready); `LOADING`
    /// (still reading its data) is not ready.
    fn ready(port: u16) -> bool {
        ask::<7>(port, b"PING\r\n")
            .is_some_and(|answer| answer.starts_with(b"+PONG") || answer.starts_with(b"-NOAUTH"))
    }
}

impl Redis {
    /// [`Redis::start`], with every client required to authenticate with
    /// `password` (`requirepass`).
    pub fn start_with_password(password: &str) -> Result<Redis, BrokerError> {
        Server::launch(RedisServer {
            password: Some(password.to_owned()),
        })
    }
}

impl Address for RedisServer {
    /// `redis://127.0.0.1:PORT` (with `:PASSWORD@` if the server wants one).
    fn url(server: &Redis) -> String {
        match &server.launcher().password {
            Some(p) => format!("redis://:{p}@127.0.0.1:{}", server.port()),
            None => format!("redis://127.0.0.1:{}", server.port()),
        }
    }
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
