//! The broker of a `bench e2e` run: started by the bench (the test kit's
//! launchers, or the bench's own webhook receiver) or a running one named
//! by its URL; where the relay and the reference publish on it.
//!
//! The relay's events are of aggregate type `bench` and event type `e2e`,
//! so with each publisher's default template they land on one destination:
//! the Redis stream `outbox:bench`, the NATS subject `outbox.bench.e2e`,
//! the RabbitMQ exchange `outbox` with routing key `e2e`, the Kafka topic
//! `outbox.event.bench`, the webhook path `/relay`. The reference publishes beside them, on a destination of its
//! own, so each run's consumer reads only its run's messages.

use std::any::Any;

use anyhow::{bail, Context, Result};
use outbox_testkit::brokers::{nats::Nats, rabbitmq::RabbitMq, redis::Redis, Address};

use super::webhook::Receiver;

pub use super::shape::{AGGREGATE_TYPE, EVENT_TYPE};

/// The relay's destination on each broker (with the default templates).
const REDIS_RELAY_STREAM: &str = "outbox:bench";
const REDIS_REFERENCE_STREAM: &str = "reference:bench";
pub const AMQP_EXCHANGE: &str = "outbox";
const AMQP_REFERENCE_KEY: &str = "reference";
const NATS_RELAY_SUBJECT: &str = "outbox.bench.e2e";
const NATS_RELAY_STREAM: &str = "OUTBOX_BENCH_E2E";
const NATS_REFERENCE_SUBJECT: &str = "reference.bench.e2e";
const NATS_REFERENCE_STREAM: &str = "OUTBOX_BENCH_REFERENCE";

/// The webhook's signing secret (the relay refuses to send unsigned).
pub const WEBHOOK_SECRET: &str = "whsec_b3V0Ym94LWJlbmNoLWUyZS13ZWJob29rLXNlY3JldCE=";

/// Which broker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Redis,
    Amqp,
    Nats,
    Kafka,
    Http,
}

/// Who publishes a run's messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// `outbox relay`.
    Relay,
    /// The broker's own client, from the bench.
    Reference,
}

/// Where one side's messages go on a broker.
#[derive(Debug, Clone)]
pub enum Destination {
    /// A stream key.
    Redis { stream: &'static str },
    /// The exchange [`AMQP_EXCHANGE`] with this routing key.
    Amqp { routing_key: &'static str },
    /// A subject and the JetStream stream that keeps it.
    Nats {
        subject: &'static str,
        stream: &'static str,
    },
    /// A topic.
    Kafka { topic: &'static str },
    /// A URL on the bench's receiver.
    Http { url: String },
}

/// A broker for the run.
pub struct Broker {
    pub kind: Kind,
    /// The client URL (the receiver's base URL for the webhook).
    pub url: String,
    /// Whether the bench started it.
    pub started: bool,
    pub receiver: Option<Receiver>,
    _server: Option<Box<dyn Any + Send>>,
}

impl Broker {
    /// The broker `spec` names: `redis`, `amqp` (or `rabbitmq`), `nats`,
    /// `kafka` (tansu, `OUTBOX_TANSU_BIN`) or `http` starts one; a
    /// `redis://`, `amqp://`, `nats://` or `kafka://` URL uses a running one.
    pub async fn start(spec: &str, slow: super::webhook::Slow) -> Result<Broker> {
        let named = |kind, url: &str| Broker {
            kind,
            url: url.to_owned(),
            started: false,
            receiver: None,
            _server: None,
        };
        match spec {
            "redis" => launched(Kind::Redis, Redis::start).await,
            "amqp" | "rabbitmq" => launched(Kind::Amqp, RabbitMq::start).await,
            "nats" => launched(Kind::Nats, Nats::start).await,
            "http" | "webhook" => {
                let receiver = Receiver::start(slow).await?;
                Ok(Broker {
                    kind: Kind::Http,
                    url: format!("http://{}", receiver.addr()),
                    started: true,
                    receiver: Some(receiver),
                    _server: None,
                })
            }
            "kafka" => {
                let (url, tansu) = super::kafka::launch().await?;
                eprintln!("bench e2e: throwaway broker at {url}");
                Ok(Broker {
                    kind: Kind::Kafka,
                    url,
                    started: true,
                    receiver: None,
                    _server: Some(Box::new(tansu)),
                })
            }
            s if s.starts_with("redis://") => Ok(named(Kind::Redis, s)),
            s if s.starts_with("amqp://") => Ok(named(Kind::Amqp, s)),
            s if s.starts_with("nats://") => Ok(named(Kind::Nats, s)),
            s if s.starts_with("kafka://") => Ok(named(Kind::Kafka, s)),
            s => bail!(
                "--publisher {s:?}: use redis, amqp, nats, kafka or http (the bench starts the broker, \
                 or runs the webhook receiver), or a redis://, amqp://, nats:// or kafka:// URL of a running broker"
            ),
        }
    }

    /// The broker's name in reports.
    pub fn name(&self) -> &'static str {
        match self.kind {
            Kind::Redis => "redis",
            Kind::Amqp => "rabbitmq",
            Kind::Nats => "nats",
            Kind::Kafka => "kafka",
            Kind::Http => "http",
        }
    }

    /// `outbox relay --publisher` for this broker, and the variables the
    /// relay needs beside it.
    pub fn relay_spec(&self) -> (String, Vec<(&'static str, &'static str)>) {
        match self.kind {
            Kind::Http => (
                format!("{}/relay", self.url),
                vec![("OUTBOX_PUBLISHER_HTTP_SECRET", WEBHOOK_SECRET)],
            ),
            _ => (self.url.clone(), Vec::new()),
        }
    }

    /// Where `side`'s messages go.
    pub fn destination(&self, side: Side) -> Destination {
        let relay = side == Side::Relay;
        match self.kind {
            Kind::Redis => Destination::Redis {
                stream: if relay {
                    REDIS_RELAY_STREAM
                } else {
                    REDIS_REFERENCE_STREAM
                },
            },
            Kind::Amqp => Destination::Amqp {
                routing_key: if relay {
                    EVENT_TYPE
                } else {
                    AMQP_REFERENCE_KEY
                },
            },
            Kind::Nats if relay => Destination::Nats {
                subject: NATS_RELAY_SUBJECT,
                stream: NATS_RELAY_STREAM,
            },
            Kind::Nats => Destination::Nats {
                subject: NATS_REFERENCE_SUBJECT,
                stream: NATS_REFERENCE_STREAM,
            },
            Kind::Kafka => Destination::Kafka {
                topic: if relay {
                    super::kafka::RELAY_TOPIC
                } else {
                    super::kafka::REFERENCE_TOPIC
                },
            },
            Kind::Http => Destination::Http {
                url: format!("{}/{}", self.url, if relay { "relay" } else { "reference" }),
            },
        }
    }

    /// Creates what must exist before anything is published: the
    /// JetStream streams (file storage) that keep both sides' subjects, the
    /// Kafka topics.
    pub async fn prepare(&self) -> Result<()> {
        if self.kind == Kind::Kafka {
            super::kafka::prepare(&self.url).await?;
        }
        if self.kind == Kind::Nats {
            let js = async_nats::jetstream::new(nats_connect(&self.url).await?);
            for side in [Side::Relay, Side::Reference] {
                let Destination::Nats { subject, stream } = self.destination(side) else {
                    unreachable!("a NATS broker has NATS destinations")
                };
                js.get_or_create_stream(async_nats::jetstream::stream::Config {
                    name: stream.to_owned(),
                    subjects: vec![subject.to_owned()],
                    storage: async_nats::jetstream::stream::StorageType::File,
                    ..Default::default()
                })
                .await
                .with_context(|| format!("cannot create the JetStream stream {stream}"))?;
            }
        }
        Ok(())
    }
}

/// A broker the test kit's launcher `start` runs on a free port.
async fn launched<L, F>(kind: Kind, start: F) -> Result<Broker>
where
    L: Address + Send + 'static,
    F: FnOnce() -> Result<
            outbox_testkit::brokers::server::Server<L>,
            outbox_testkit::brokers::BrokerError,
        > + Send
        + 'static,
{
    let server = tokio::task::spawn_blocking(start)
        .await?
        .context("cannot start the broker")?;
    let url = server.url();
    eprintln!("bench e2e: throwaway broker at {url}");
    Ok(Broker {
        kind,
        url,
        started: true,
        receiver: None,
        _server: Some(Box::new(server)),
    })
}

/// A NATS connection to `url`.
pub async fn nats_connect(url: &str) -> Result<async_nats::Client> {
    async_nats::connect(url)
        .await
        .with_context(|| format!("cannot connect to nats at {url}"))
}

/// An AMQP connection to `url` and a channel on it.
pub async fn amqp_channel(url: &str) -> Result<(lapin::Connection, lapin::Channel)> {
    let conn = lapin::Connection::connect(url, lapin::ConnectionProperties::default())
        .await
        .with_context(|| format!("cannot connect to rabbitmq at {url}"))?;
    let ch = conn.create_channel().await?;
    Ok((conn, ch))
}
