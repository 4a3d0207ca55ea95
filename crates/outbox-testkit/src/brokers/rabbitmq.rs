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
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::{log_to, temp_dir, BrokerError};
use crate::process::{
    connect_local, find_program, free_port, tail_file, Group, NotReady, Signal, Watchdog,
};

/// The name [`super::skipped`] knows this broker by.
pub const NAME: &str = "rabbitmq";

/// Environment variable naming the `rabbitmq-server` script to run.
pub const SERVER_ENV: &str = "OUTBOX_RABBITMQ_SERVER";

/// The broker's `max_message_size`: larger messages close the channel.
pub const MAX_MESSAGE_BYTES: usize = 1024 * 1024;

/// How long a start may take.
const READY_TIMEOUT: Duration = Duration::from_secs(90);

/// A running (or stopped) RabbitMQ node; killed on drop.
#[derive(Debug)]
pub struct RabbitMq {
    dir: tempfile::TempDir,
    server: PathBuf,
    port: u16,
    dist_port: u16,
    epmd_port: u16,
    node: String,
    epmd: Option<Group>,
    broker: Option<Group>,
    last_start: Duration,
}

impl RabbitMq {
    /// Starts a node and waits until it accepts AMQP connections.
    pub fn start() -> Result<RabbitMq, BrokerError> {
        let server = find_program(
            &[
                std::env::var_os(SERVER_ENV).map(PathBuf::from).unwrap_or_default(),
                PathBuf::from("/usr/lib/rabbitmq/bin/rabbitmq-server"),
            ],
            "rabbitmq-server",
        )
        .ok_or_else(|| BrokerError::NotInstalled {
            broker: NAME,
            hint: format!(
                "no rabbitmq-server found (looked at ${SERVER_ENV}, /usr/lib/rabbitmq/bin/rabbitmq-server, PATH); \
                 install it: apt-get install rabbitmq-server"
            ),
        })?;
        let dir = temp_dir(NAME)?;
        let port = free_port();
        let dist_port = free_port();
        let epmd_port = free_port();
        let config = format!(
            "listeners.tcp.default = 127.0.0.1:{port}\n\
             max_message_size = {MAX_MESSAGE_BYTES}\n\
             log.console = false\n\
             log.file.level = info\n\
             disk_free_limit.absolute = 10MB\n"
        );
        fs::write(dir.path().join("rabbitmq.conf"), config)
            .map_err(BrokerError::io(NAME, "writing rabbitmq.conf"))?;
        fs::write(dir.path().join("enabled_plugins"), "[].\n")
            .map_err(BrokerError::io(NAME, "writing enabled_plugins"))?;
        let mut rabbit = RabbitMq {
            server,
            port,
            dist_port,
            epmd_port,
            node: format!("rabbit_{:08x}@localhost", rand::random::<u32>()),
            dir,
            epmd: None,
            broker: None,
            last_start: Duration::ZERO,
        };
        rabbit.start_again()?;
        Ok(rabbit)
    }

    /// [`RabbitMq::start`] unless [`super::SKIP_ENV`] names `rabbitmq`, in
    /// which case it says so on stderr and returns `None`.
    ///
    /// # Panics
    ///
    /// If the broker cannot be started (the message says what is missing).
    pub fn start_or_skip() -> Option<RabbitMq> {
        super::start_or_skip(NAME, RabbitMq::start)
    }

    /// `amqp://guest:guest@127.0.0.1:PORT/%2f`.
    pub fn url(&self) -> String {
        format!("amqp://guest:guest@127.0.0.1:{}/%2f", self.port)
    }

    /// The AMQP port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// How long the last start took until the broker accepted connections.
    pub fn last_start_duration(&self) -> Duration {
        self.last_start
    }

    /// The broker's main log file.
    pub fn log_path(&self) -> PathBuf {
        self.dir
            .path()
            .join("log")
            .join(format!("{}.log", self.node))
    }

    /// Whether the broker process is running.
    pub fn is_running(&mut self) -> bool {
        self.broker.as_mut().is_some_and(|g| g.exited().is_none())
    }

    /// Kills the broker (`SIGKILL`, as a crash would). Its data stays:
    /// durable queues and persistent, confirmed messages survive a
    /// [`RabbitMq::start_again`].
    pub fn stop(&mut self) {
        if let Some(mut g) = self.broker.take() {
            g.kill();
        }
    }

    /// Freezes the broker (`SIGSTOP` to its processes): connections stay
    /// open but nothing is read or answered, as with a hung host.
    pub fn freeze(&self) {
        if let Some(g) = &self.broker {
            g.signal(Signal::Stop);
        }
    }

    /// Lets a [frozen](RabbitMq::freeze) broker run again (`SIGCONT`).
    pub fn thaw(&self) {
        if let Some(g) = &self.broker {
            g.signal(Signal::Cont);
        }
    }

    /// Starts the broker again on the same port with the same data, and
    /// waits until it accepts connections.
    pub fn start_again(&mut self) -> Result<(), BrokerError> {
        self.stop();
        let started = Instant::now();
        if self.epmd.as_mut().is_none_or(|g| g.exited().is_some()) {
            self.epmd = Some(self.spawn_epmd()?);
        }
        let base = self.dir.path();
        let (out, err) = log_to(NAME, &base.join("server.out"))?;
        let mut cmd = Command::new(&self.server);
        cmd.current_dir(base)
            .env("HOME", base)
            .env("ERL_EPMD_PORT", self.epmd_port.to_string())
            .env("ERL_EPMD_ADDRESS", "127.0.0.1")
            .env("RABBITMQ_NODENAME", &self.node)
            .env("RABBITMQ_NODE_IP_ADDRESS", "127.0.0.1")
            .env("RABBITMQ_NODE_PORT", self.port.to_string())
            .env("RABBITMQ_DIST_PORT", self.dist_port.to_string())
            .env("RABBITMQ_MNESIA_BASE", base.join("mnesia"))
            .env("RABBITMQ_LOG_BASE", base.join("log"))
            .env("RABBITMQ_CONFIG_FILE", base.join("rabbitmq.conf"))
            .env(
                "RABBITMQ_ADVANCED_CONFIG_FILE",
                base.join("advanced.config"),
            )
            .env("RABBITMQ_CONF_ENV_FILE", base.join("rabbitmq-env.conf"))
            .env(
                "RABBITMQ_ENABLED_PLUGINS_FILE",
                base.join("enabled_plugins"),
            )
            .env("RABBITMQ_PLUGINS_EXPAND_DIR", base.join("plugins-expand"))
            .env("RABBITMQ_PID_FILE", base.join("rabbit.pid"))
            .env(
                "RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS",
                "-kernel inet_dist_use_interface {127,0,0,1}",
            )
            .stdout(out)
            .stderr(err);
        let watchdog = Watchdog::kill_group().removing(self.dir.path());
        let group = self
            .broker
            .insert(Group::spawn(cmd, &watchdog).map_err(BrokerError::io(
                NAME,
                format!("running {}", self.server.display()),
            ))?);
        let port = self.port;
        let waited = group.wait_ready(started + READY_TIMEOUT, Duration::from_millis(50), || {
            amqp_ready(port)
        });
        let reason = match waited {
            Ok(()) => {
                self.last_start = started.elapsed();
                return Ok(());
            }
            Err(NotReady::Exited(status)) => format!("rabbitmq-server exited with {status}"),
            Err(NotReady::TimedOut) => {
                format!("no AMQP handshake on 127.0.0.1:{port} within {READY_TIMEOUT:?}")
            }
        };
        let e = self.start_error(reason);
        self.stop();
        Err(e)
    }

    fn start_error(&self, reason: String) -> BrokerError {
        let log = self.log_path();
        let (log, tail_text) = if log.exists() {
            (log.clone(), tail_file(&log, 30))
        } else {
            let out = self.dir.path().join("server.out");
            (out.clone(), tail_file(&out, 30))
        };
        BrokerError::Start {
            broker: NAME,
            reason,
            log: log.display().to_string(),
            tail: tail_text,
        }
    }

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
        // Wait for it to listen, so the broker does not start one of its own.
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

    /// The directory holding the broker's data and logs.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for RabbitMq {
    fn drop(&mut self) {
        self.stop();
        if let Some(mut g) = self.epmd.take() {
            g.kill();
        }
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

/// Whether an AMQP 0-9-1 server answers the protocol header on `port` with
/// `connection.start`.
fn amqp_ready(port: u16) -> bool {
    let Some(mut stream) = connect_local(port) else {
        return false;
    };
    if stream.write_all(b"AMQP\x00\x00\x09\x01").is_err() {
        return false;
    }
    // Frame header (type 1 = method, channel 0, size), then class 10
    // (connection), method 10 (start).
    let mut head = [0_u8; 11];
    if stream.read_exact(&mut head).is_err() {
        return false;
    }
    head[0] == 1 && head[1..3] == [0, 0] && head[7..11] == [0, 10, 0, 10]
}
