//! A throwaway RabbitMQ node.
//!
//! [`RabbitMq::start`] runs `rabbitmq-server` (as the current user, root
//! included) with every `RABBITMQ_*` location in a temporary directory, its
//! own `epmd`, and all listeners on `127.0.0.1` free ports. No plugins are
//! enabled; the broker's `max_message_size` is [`MAX_MESSAGE_BYTES`] so
//! tests can provoke its size limit cheaply. Starting takes about ten
//! seconds.
//!
//! Install it with `apt-get install rabbitmq-server` (Debian, Ubuntu); the
//! package may start a system instance, which these tests do not use.
//! `OUTBOX_RABBITMQ_SERVER` may name another `rabbitmq-server` script.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::server::{ask, Launch, Program, Server};
use super::{Address, BrokerError};
use crate::process::{connect_local, find_program, free_port, Group, Watchdog};

/// The name [`super::skipped`] knows this broker by.
pub const NAME: &str = "rabbitmq";

/// Environment variable naming the `rabbitmq-server` script to run.
pub const SERVER_ENV: &str = "OUTBOX_RABBITMQ_SERVER";

/// The broker's `max_message_size`: larger messages close the channel.
pub const MAX_MESSAGE_BYTES: usize = 1024 * 1024;

/// A running (or stopped) RabbitMQ node; killed on drop, its `epmd` with
/// it. Its data stays across [`Server::stop`]: durable queues and
/// persistent, confirmed messages survive a [`Server::start_again`].
pub type RabbitMq = Server<RabbitMqServer>;

/// How a RabbitMQ node is run: `rabbitmq-server` with every `RABBITMQ_*`
/// location in the node's directory, a node name of its own, and its own
/// `epmd` and distribution port on `127.0.0.1`, chosen once and kept across
/// restarts.
#[derive(Debug)]
pub struct RabbitMqServer {
    dist_port: u16,
    epmd_port: u16,
    node: String,
    epmd: Option<Group>,
}

impl Default for RabbitMqServer {
    /// Free ports for distribution and `epmd`, and a random node name;
    /// `epmd` is started with the node.
    fn default() -> RabbitMqServer {
        RabbitMqServer {
            dist_port: free_port(),
            epmd_port: free_port(),
            node: format!("rabbit_{:08x}@localhost", rand::random::<u32>()),
            epmd: None,
        }
    }
}

impl Launch for RabbitMqServer {
    const NAME: &'static str = NAME;
    const PROGRAM: Program = Program::package(
        SERVER_ENV,
        "/usr/lib/rabbitmq/bin/rabbitmq-server",
        "rabbitmq-server",
    );
    const OUTPUT: &'static str = "server.out";
    const AWAITED: &'static str = "AMQP handshake";
    const READY_TIMEOUT: Duration = Duration::from_secs(90);
    const POLL: Duration = Duration::from_millis(50);

    fn command(&self, cmd: &mut Command, dir: &Path, port: u16) {
        cmd.env("HOME", dir)
            .env("ERL_EPMD_PORT", self.epmd_port.to_string())
            .env("ERL_EPMD_ADDRESS", "127.0.0.1")
            .env("RABBITMQ_NODENAME", &self.node)
            .env("RABBITMQ_NODE_IP_ADDRESS", "127.0.0.1")
            .env("RABBITMQ_NODE_PORT", port.to_string())
            .env("RABBITMQ_DIST_PORT", self.dist_port.to_string())
            .env("RABBITMQ_MNESIA_BASE", dir.join("mnesia"))
            .env("RABBITMQ_LOG_BASE", dir.join("log"))
            .env("RABBITMQ_CONFIG_FILE", dir.join("rabbitmq.conf"))
            .env("RABBITMQ_ADVANCED_CONFIG_FILE", dir.join("advanced.config"))
            .env("RABBITMQ_CONF_ENV_FILE", dir.join("rabbitmq-env.conf"))
            .env("RABBITMQ_ENABLED_PLUGINS_FILE", dir.join("enabled_plugins"))
            .env("RABBITMQ_PLUGINS_EXPAND_DIR", dir.join("plugins-expand"))
            .env("RABBITMQ_PID_FILE", dir.join("rabbit.pid"))
            .env(
                "RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS",
                "-kernel inet_dist_use_interface {127,0,0,1}",
            );
    }

    /// Whether an AMQP 0-9-1 server answers the protocol header on `port`
    /// with `connection.start`.
    fn ready(port: u16) -> bool {
        // Frame header (type 1 = method, channel 0, size), then class 10
        // (connection), method 10 (start).
        ask::<11>(port, b"AMQP\x00\x00\x09\x01").is_some_and(|head| {
            head[0] == 1 && head[1..3] == [0, 0] && head[7..11] == [0, 10, 0, 10]
        })
    }

    /// Writes the configuration (listener on `port`, no plugins) and starts
    /// `epmd` unless it still runs.
    fn prepare(&mut self, dir: &Path, port: u16) -> Result<(), BrokerError> {
        let config = format!(
            "listeners.tcp.default = 127.0.0.1:{port}\n\
             max_message_size = {MAX_MESSAGE_BYTES}\n\
             log.console = false\n\
             log.file.level = info\n\
             disk_free_limit.absolute = 10MB\n"
        );
        fs::write(dir.join("rabbitmq.conf"), config)
            .map_err(BrokerError::io(NAME, "writing rabbitmq.conf"))?;
        fs::write(dir.join("enabled_plugins"), "[].\n")
            .map_err(BrokerError::io(NAME, "writing enabled_plugins"))?;
        if self.epmd.as_mut().is_none_or(|g| g.exited().is_some()) {
            self.epmd = Some(self.spawn_epmd()?);
        }
        Ok(())
    }

    /// `log/NODE.log`: the node's own log, written once it has started
    /// logging (until then, only [`Launch::OUTPUT`] has anything).
    fn log_path(&self, dir: &Path) -> PathBuf {
        dir.join("log").join(format!("{}.log", self.node))
    }
}

impl RabbitMqServer {
    /// Runs `epmd` on this node's `epmd` port and waits until it
    /// listens, so the node does not start one of its own.
    fn spawn_epmd(&self) -> Result<Group, BrokerError> {
        let epmd = find_program(&[PathBuf::from("/usr/lib/erlang/bin/epmd")], "epmd").ok_or_else(
            || BrokerError::NotInstalled {
                broker: NAME,
                hint: "no epmd found (part of Erlang); install rabbitmq-server, which brings it"
                    .into(),
            },
        )?;
        let mut cmd = Command::new(epmd);
        cmd.arg("-port")
            .arg(self.epmd_port.to_string())
            .arg("-address")
            .arg("127.0.0.1")
            .env("ERL_EPMD_ADDRESS", "127.0.0.1")
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let group = Group::spawn(cmd, &Watchdog::kill_group())
            .map_err(BrokerError::io(NAME, "running epmd"))?;
        let deadline = Instant::now() + Duration::from_secs(10);
        while connect_local(self.epmd_port).is_none() {
            if Instant::now() > deadline {
                return Err(BrokerError::Start {
                    broker: NAME,
                    reason: format!("epmd did not listen on 127.0.0.1:{}", self.epmd_port),
                    log: "(epmd has no log)".into(),
                    tail: String::new(),
                });
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(group)
    }
}

impl Address for RabbitMqServer {
    /// `amqp://guest:guest@127.0.0.1:PORT/%2f`.
    fn url(server: &RabbitMq) -> String {
        format!("amqp://guest:guest@127.0.0.1:{}/%2f", server.port())
    }
}

/// Declares `exchange` as the AMQP publisher does (a durable topic
/// exchange) and a durable `queue` bound to it with `pattern`, so that
/// messages published before anyone consumes are kept for reading back
/// (unbound ones would come back as unroutable).
///
/// # Panics
///
/// If the broker refuses any of the three declarations.
#[cfg(feature = "amqp")]
pub async fn bind_queue(ch: &lapin::Channel, exchange: &str, queue: &str, pattern: &str) {
    use lapin::options::{ExchangeDeclareOptions, QueueBindOptions, QueueDeclareOptions};
    use lapin::types::FieldTable;

    ch.exchange_declare(
        exchange.into(),
        lapin::ExchangeKind::Topic,
        ExchangeDeclareOptions {
            durable: true,
            ..Default::default()
        },
        FieldTable::default(),
    )
    .await
    .unwrap_or_else(|e| panic!("declaring exchange {exchange}: {e}"));
    ch.queue_declare(
        queue.into(),
        QueueDeclareOptions {
            durable: true,
            ..Default::default()
        },
        FieldTable::default(),
    )
    .await
    .unwrap_or_else(|e| panic!("declaring queue {queue}: {e}"));
    ch.queue_bind(
        queue.into(),
        exchange.into(),
        pattern.into(),
        QueueBindOptions::default(),
        FieldTable::default(),
    )
    .await
    .unwrap_or_else(|e| panic!("binding queue {queue} to {exchange} with {pattern}: {e}"));
}

/// A message's AMQP headers as text: string values as they are, others in
/// their debug form.
#[cfg(feature = "amqp")]
pub fn headers_as_text(
    properties: &lapin::BasicProperties,
) -> std::collections::BTreeMap<String, String> {
    use lapin::types::AMQPValue;
    let text = |value: &AMQPValue| match value {
        AMQPValue::LongString(s) => String::from_utf8_lossy(s.as_bytes()).into_owned(),
        AMQPValue::ShortString(s) => s.as_str().to_owned(),
        other => format!("{other:?}"),
    };
    properties
        .headers()
        .as_ref()
        .map(|t| {
            t.inner()
                .iter()
                .map(|(k, v)| (k.as_str().to_owned(), text(v)))
                .collect()
        })
        .unwrap_or_default()
}
