//! A throwaway stand-in for Amazon SQS and SNS: moto's server mode.
//!
//! [`Moto::start`] runs moto's server (`moto.server`, with the one change `BOOT` describes) on a free port of
//! `127.0.0.1` and waits until it answers. Its state (queues, topics,
//! messages) lives in memory: a [`Moto::stop`] and [`Moto::start_again`]
//! lose it. Starting takes one to three seconds.
//!
//! Install it with `pip install "moto[server]"` (`.ci/run` does when it is
//! missing). `OUTBOX_MOTO_PYTHON` may name another Python interpreter.
//! Clients need any credentials and a region: see [`Moto::env`].
//!
//! Longer than most files: the server and the SDK client the tests read it
//! back with (`client`) are kept together, since the client is set up for
//! this server only.

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use super::{log_to, temp_dir, BrokerError};
use crate::process::{
    connect_local, find_program, free_port, tail_file, Group, NotReady, Watchdog,
};

/// The name [`super::skipped`] knows this stand-in by.
pub const NAME: &str = "moto";

/// Environment variable naming the Python interpreter to run moto with.
pub const PYTHON_ENV: &str = "OUTBOX_MOTO_PYTHON";

/// The region the tests use.
pub const REGION: &str = "us-east-1";

/// The account moto puts every resource in.
pub const ACCOUNT: &str = "123456789012";

/// Starts moto's server with one change: its clock read without an
/// argument (`unix_time()`, "now") is `time.time()`. moto computes a FIFO
/// queue's attributes, reading the clock for every message in it, on every
/// message sent; with its own date arithmetic that made sending to a queue
/// of 2,000 messages take seconds per batch. The time read is the same.
const BOOT: &str = "\
import sys, time
import moto.core.utils as u
_unix_time = u.unix_time
def unix_time(dt=None):
    return time.time() if dt is None else _unix_time(dt)
u.unix_time = unix_time
from moto.server import main
sys.exit(main())
";

/// How long a start may take.
const READY_TIMEOUT: Duration = Duration::from_secs(60);

/// A running (or stopped) moto server; killed on drop.
#[derive(Debug)]
pub struct Moto {
    dir: tempfile::TempDir,
    python: PathBuf,
    port: u16,
    server: Option<Group>,
    last_start: Duration,
}

impl Moto {
    /// Starts moto's server and waits until it answers HTTP.
    pub fn start() -> Result<Moto, BrokerError> {
        let python = find_program(
            &[std::env::var_os(PYTHON_ENV)
                .map(PathBuf::from)
                .unwrap_or_default()],
            "python3",
        )
        .ok_or_else(|| BrokerError::NotInstalled {
            broker: NAME,
            hint: format!(
                "no python3 found (looked at ${PYTHON_ENV}, PATH); install Python 3 and \
                 pip install \"moto[server]\""
            ),
        })?;
        let mut moto = Moto {
            dir: temp_dir(NAME)?,
            python,
            port: free_port(),
            server: None,
            last_start: Duration::ZERO,
        };
        let mut tries = 0;
        loop {
            match moto.start_again() {
                Err(BrokerError::Start { tail, .. })
                    if tries < 3 && tail.to_lowercase().contains("address already in use") =>
                {
                    tries += 1;
                    moto.port = free_port();
                }
                other => break other?,
            }
        }
        Ok(moto)
    }

    /// [`Moto::start`] unless [`super::SKIP_ENV`] names `moto`, in which
    /// case it says so on stderr and returns `None`.
    ///
    /// # Panics
    ///
    /// If the server cannot be started (the message says what is missing).
    pub fn start_or_skip() -> Option<Moto> {
        super::start_or_skip(NAME, Moto::start)
    }

    /// [`Moto::start_or_skip`] on a blocking thread, for async tests.
    ///
    /// # Panics
    ///
    /// As [`Moto::start_or_skip`].
    pub async fn start_or_skip_blocking() -> Option<Moto> {
        super::start_blocking_or_skip(NAME, Moto::start).await
    }

    /// `http://127.0.0.1:PORT`: the endpoint of every service.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The variables a client (the `outbox` program) needs to use this
    /// server through the SDK's standard chain: endpoint, region and
    /// (any) credentials.
    pub fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("AWS_ENDPOINT_URL", self.url()),
            ("AWS_REGION", REGION.to_owned()),
            ("AWS_ACCESS_KEY_ID", "testing".to_owned()),
            ("AWS_SECRET_ACCESS_KEY", "testing".to_owned()),
            ("AWS_EC2_METADATA_DISABLED", "true".to_owned()),
        ]
    }

    /// How long the last start took until the server answered.
    pub fn last_start_duration(&self) -> Duration {
        self.last_start
    }

    /// The server's log file.
    pub fn log_path(&self) -> PathBuf {
        self.dir.path().join("moto.log")
    }

    /// Kills the server (`SIGKILL`); everything it held is lost.
    pub fn stop(&mut self) {
        if let Some(mut g) = self.server.take() {
            g.kill();
        }
    }

    /// Starts the server again on the same port (empty), and waits until
    /// it answers.
    pub fn start_again(&mut self) -> Result<(), BrokerError> {
        self.stop();
        let started = Instant::now();
        let log = self.log_path();
        let (out, err) = log_to(NAME, &log)?;
        let mut cmd = Command::new(&self.python);
        cmd.current_dir(self.dir.path())
            .args(["-c", BOOT, "-H", "127.0.0.1", "-p"])
            .arg(self.port.to_string())
            .env("PYTHONUNBUFFERED", "1")
            .stdout(out)
            .stderr(err);
        let watchdog = Watchdog::kill_group().removing(self.dir.path());
        let group = self
            .server
            .insert(Group::spawn(cmd, &watchdog).map_err(BrokerError::io(
                NAME,
                format!("running {}", self.python.display()),
            ))?);
        let port = self.port;
        let needle = format!("127.0.0.1:{port}");
        // Its own log says it listens: another server that took the port
        // first would answer the probe too.
        let waited = group.wait_ready(started + READY_TIMEOUT, Duration::from_millis(50), || {
            std::fs::read_to_string(&log).is_ok_and(|l| l.contains(&needle))
                && connect_local(port).is_some()
        });
        let reason = match waited {
            Ok(()) => {
                self.last_start = started.elapsed();
                return Ok(());
            }
            Err(NotReady::Exited(status)) => format!("moto's server exited with {status}"),
            Err(NotReady::TimedOut) => {
                format!("no answer on 127.0.0.1:{port} within {READY_TIMEOUT:?}")
            }
        };
        let tail = tail_file(&log, 30);
        self.stop();
        if tail.contains("No module named") {
            return Err(BrokerError::NotInstalled {
                broker: NAME,
                hint: format!(
                    "{} cannot import moto's server: pip install \"moto[server]\"",
                    self.python.display()
                ),
            });
        }
        Err(BrokerError::Start {
            broker: NAME,
            reason,
            log: log.display().to_string(),
            tail,
        })
    }
}

impl Drop for Moto {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Creating queues and topics on moto and reading messages back, with the
/// AWS SDK, for tests of the SQS and SNS publishers.
#[cfg(feature = "sqs")]
pub mod client {
    use std::collections::BTreeMap;
    use std::time::{Duration, Instant};

    use aws_sdk_sqs::types::{MessageSystemAttributeName, QueueAttributeName};

    use super::REGION;

    /// The SDK's configuration for moto at `endpoint` (plain HTTP, test
    /// credentials).
    pub fn config(endpoint: &str) -> aws_config::SdkConfig {
        use aws_config::{BehaviorVersion, Region};
        use aws_credential_types::Credentials;
        aws_config::SdkConfig::builder()
            .behavior_version(BehaviorVersion::latest())
            .region(Region::new(REGION))
            .endpoint_url(endpoint)
            .credentials_provider(
                aws_credential_types::provider::SharedCredentialsProvider::new(Credentials::new(
                    "testing", "testing", None, None, "moto",
                )),
            )
            .http_client(aws_smithy_http_client::Builder::new().build_http())
            .build()
    }

    /// An SQS client for moto at `endpoint`.
    pub fn sqs(endpoint: &str) -> aws_sdk_sqs::Client {
        aws_sdk_sqs::Client::new(&config(endpoint))
    }

    /// An SNS client for moto at `endpoint`.
    pub fn sns(endpoint: &str) -> aws_sdk_sns::Client {
        aws_sdk_sns::Client::new(&config(endpoint))
    }

    /// Creates queue `name` (FIFO if it ends in `.fifo`, without
    /// content-based de-duplication); returns its URL.
    ///
    /// # Panics
    ///
    /// If moto refuses.
    pub async fn create_queue(sqs: &aws_sdk_sqs::Client, name: &str) -> String {
        let mut req = sqs.create_queue().queue_name(name);
        if name.ends_with(".fifo") {
            req = req
                .attributes(QueueAttributeName::FifoQueue, "true")
                .attributes(QueueAttributeName::ContentBasedDeduplication, "false");
        }
        req.send()
            .await
            .unwrap_or_else(|e| {
                panic!(
                    "creating queue {name}: {}",
                    aws_sdk_sqs::error::DisplayErrorContext(e)
                )
            })
            .queue_url()
            .expect("a queue URL")
            .to_owned()
    }

    /// Creates topic `name` (FIFO if it ends in `.fifo`); returns its ARN.
    ///
    /// # Panics
    ///
    /// If moto refuses.
    pub async fn create_topic(sns: &aws_sdk_sns::Client, name: &str) -> String {
        let mut req = sns.create_topic().name(name);
        if name.ends_with(".fifo") {
            req = req
                .attributes("FifoTopic", "true")
                .attributes("ContentBasedDeduplication", "false");
        }
        req.send()
            .await
            .unwrap_or_else(|e| {
                panic!(
                    "creating topic {name}: {}",
                    aws_sdk_sns::error::DisplayErrorContext(e)
                )
            })
            .topic_arn()
            .expect("a topic ARN")
            .to_owned()
    }

    /// Subscribes the queue at `queue_url` to `topic_arn` with raw message
    /// delivery (the body is the message, its attributes the message's).
    ///
    /// # Panics
    ///
    /// If moto refuses.
    pub async fn subscribe_queue(
        sns: &aws_sdk_sns::Client,
        sqs: &aws_sdk_sqs::Client,
        topic_arn: &str,
        queue_url: &str,
    ) {
        let arn = sqs
            .get_queue_attributes()
            .queue_url(queue_url)
            .attribute_names(QueueAttributeName::QueueArn)
            .send()
            .await
            .expect("queue attributes")
            .attributes()
            .and_then(|a| a.get(&QueueAttributeName::QueueArn).cloned())
            .expect("a queue ARN");
        sns.subscribe()
            .topic_arn(topic_arn)
            .protocol("sqs")
            .endpoint(arn)
            .attributes("RawMessageDelivery", "true")
            .send()
            .await
            .unwrap_or_else(|e| {
                panic!(
                    "subscribing to {topic_arn}: {}",
                    aws_sdk_sns::error::DisplayErrorContext(e)
                )
            });
    }

    /// One message read back.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct Received {
        /// The body.
        pub body: String,
        /// The message attributes (string values).
        pub attributes: BTreeMap<String, String>,
        /// FIFO: the `MessageGroupId`.
        pub group_id: Option<String>,
        /// FIFO: the `MessageDeduplicationId`.
        pub dedup_id: Option<String>,
    }

    impl Received {
        /// The attributes with the `outbox-headers` JSON object's members
        /// added: every header the event had.
        pub fn headers(&self) -> BTreeMap<String, String> {
            let mut out = self.attributes.clone();
            if let Some(json) = out.remove("outbox-headers") {
                let more: BTreeMap<String, String> =
                    serde_json::from_str(&json).expect("outbox-headers is a JSON object");
                for (k, v) in more {
                    out.entry(k).or_insert(v);
                }
            }
            out
        }
    }

    /// Receives (and deletes) messages from `queue_url`, 10 at a time
    /// (short polls: moto's long poll waits for all 10, which a FIFO queue
    /// holding few groups never has), until `done` says enough arrived or `deadline`
    /// passed (at least one receive call is made).
    ///
    /// # Panics
    ///
    /// If a receive fails.
    pub async fn receive(
        sqs: &aws_sdk_sqs::Client,
        queue_url: &str,
        deadline: Duration,
        mut done: impl FnMut(&[Received]) -> bool,
    ) -> Vec<Received> {
        let end = Instant::now() + deadline;
        let mut out = Vec::new();
        loop {
            let answer = sqs
                .receive_message()
                .queue_url(queue_url)
                .max_number_of_messages(10)
                .wait_time_seconds(0)
                .visibility_timeout(60)
                .message_attribute_names("All")
                .message_system_attribute_names(MessageSystemAttributeName::All)
                .send()
                .await
                .unwrap_or_else(|e| {
                    panic!(
                        "receiving from {queue_url}: {}",
                        aws_sdk_sqs::error::DisplayErrorContext(e)
                    )
                });
            let mut handles = Vec::new();
            for m in answer.messages() {
                let attributes = m
                    .message_attributes()
                    .map(|a| {
                        a.iter()
                            .map(|(k, v)| {
                                (k.clone(), v.string_value().unwrap_or_default().to_owned())
                            })
                            .collect()
                    })
                    .unwrap_or_default();
                let system = m.attributes();
                let get = |n: MessageSystemAttributeName| system.and_then(|s| s.get(&n).cloned());
                out.push(Received {
                    body: m.body().unwrap_or_default().to_owned(),
                    attributes,
                    group_id: get(MessageSystemAttributeName::MessageGroupId),
                    dedup_id: get(MessageSystemAttributeName::MessageDeduplicationId),
                });
                if let Some(h) = m.receipt_handle() {
                    handles.push(h.to_owned());
                }
            }
            if !handles.is_empty() {
                let entries: Vec<_> = handles
                    .into_iter()
                    .enumerate()
                    .map(|(n, h)| {
                        aws_sdk_sqs::types::DeleteMessageBatchRequestEntry::builder()
                            .id(n.to_string())
                            .receipt_handle(h)
                            .build()
                            .expect("a delete entry")
                    })
                    .collect();
                let _ = sqs
                    .delete_message_batch()
                    .queue_url(queue_url)
                    .set_entries(Some(entries))
                    .send()
                    .await;
            }
            if done(&out) || Instant::now() >= end {
                return out;
            }
            if answer.messages().is_empty() {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
}
