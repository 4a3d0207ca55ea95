//! Building the publisher from `--publisher` / `publisher.spec` and the
//! optional `[publisher.kafka]` / `[publisher.amqp]` tables.

use std::sync::Arc;

use anyhow::{bail, Context, Result};
use outbox::Publisher;
use outbox_publishers::stream::NullPublisher;
use outbox_publishers::{FilePublisher, StdoutPublisher};

const SPECS: &str =
    "stdout, file:PATH, null, kafka://HOST:PORT[,HOST:PORT…] or amqp://USER:PASS@HOST:PORT/VHOST";

/// Builds the publisher named by `spec`; a broker's table from the config
/// file, if any, supplies its other settings (the spec's address wins).
pub fn from_config(
    spec: &str,
    kafka: Option<&toml::Table>,
    amqp: Option<&toml::Table>,
) -> Result<Arc<dyn Publisher>> {
    if spec == "stdout" {
        return Ok(Arc::new(StdoutPublisher));
    }
    if spec == "null" {
        return Ok(Arc::new(NullPublisher::default()));
    }
    if let Some(path) = spec.strip_prefix("file:") {
        if path.is_empty() {
            bail!("invalid --publisher {spec:?}: file: needs a path, e.g. file:/var/lib/outbox/events.jsonl");
        }
        let publisher = FilePublisher::open(path)
            .with_context(|| format!("cannot open --publisher file {path:?}"))?;
        return Ok(Arc::new(publisher));
    }
    if spec.starts_with("kafka://") {
        return kafka_publisher(spec, kafka);
    }
    if spec.starts_with("amqp://") || spec.starts_with("amqps://") {
        return amqp_publisher(spec, amqp);
    }
    bail!(
        "unknown --publisher {:?}: use {SPECS}",
        crate::db::redact_text(spec)
    )
}

#[cfg(feature = "kafka")]
fn kafka_publisher(spec: &str, table: Option<&toml::Table>) -> Result<Arc<dyn Publisher>> {
    use outbox_publishers::kafka::{KafkaConfig, KafkaPublisher};
    let mut config: KafkaConfig = match table {
        Some(t) => toml::Value::Table(t.clone())
            .try_into()
            .context("invalid [publisher.kafka]")?,
        None => KafkaConfig::default(),
    };
    config.brokers = KafkaConfig::from_url(spec)?.brokers;
    config.validate()?;
    Ok(Arc::new(KafkaPublisher::new(config)?))
}

#[cfg(not(feature = "kafka"))]
fn kafka_publisher(_: &str, _: Option<&toml::Table>) -> Result<Arc<dyn Publisher>> {
    bail!("this outbox was built without Kafka support: rebuild with --features kafka")
}

#[cfg(feature = "amqp")]
fn amqp_publisher(spec: &str, table: Option<&toml::Table>) -> Result<Arc<dyn Publisher>> {
    use outbox_publishers::amqp::{AmqpConfig, AmqpPublisher};
    let mut config: AmqpConfig = match table {
        Some(t) => toml::Value::Table(t.clone())
            .try_into()
            .context("invalid [publisher.amqp]")?,
        None => AmqpConfig::default(),
    };
    config.url = spec.to_owned();
    config.validate()?;
    Ok(Arc::new(AmqpPublisher::new(config)?))
}

#[cfg(not(feature = "amqp"))]
fn amqp_publisher(_: &str, _: Option<&toml::Table>) -> Result<Arc<dyn Publisher>> {
    bail!("this outbox was built without RabbitMQ support: rebuild with --features amqp")
}
