//! The publisher named by `--publisher` / `publisher.spec` and the optional
//! `[publisher.kafka]` / `[publisher.amqp]` tables.
//!
//! [`check`] is the one validation of these settings. Loading the
//! configuration runs it for every command, so `outbox config check` and
//! `outbox relay` accept and refuse exactly the same publishers;
//! [`from_config`] then only opens or connects what it accepted.

use std::sync::Arc;

use anyhow::{anyhow, bail, Context, Result};
use outbox::Publisher;
use outbox_publishers::{FilePublisher, StdoutPublisher};

/// What a publisher spec may be.
pub const FORMS: &str =
    "use stdout, file:PATH, kafka://HOST:PORT[,HOST:PORT…] or amqp://USER:PASS@HOST:PORT/VHOST";

/// A publisher whose settings passed [`check`]; nothing is open yet.
#[derive(Debug)]
pub enum Checked {
    /// JSON lines on standard output.
    Stdout,
    /// JSON lines appended to this file.
    File(String),
    /// Kafka, with every setting validated.
    #[cfg(feature = "kafka")]
    Kafka(outbox_publishers::kafka::KafkaConfig),
    /// RabbitMQ, with every setting validated.
    #[cfg(feature = "amqp")]
    Amqp(outbox_publishers::amqp::AmqpConfig),
}

/// Validates `spec` and the broker table it uses, without opening,
/// creating or connecting to anything. `name` is the setting as the user
/// wrote it (`--publisher`, `OUTBOX_PUBLISHER`, `publisher (FILE:LINE)`).
pub fn check(
    name: &str,
    spec: &str,
    kafka: Option<&toml::Table>,
    amqp: Option<&toml::Table>,
) -> Result<Checked> {
    if spec.trim().is_empty() {
        bail!("{name} is empty: {FORMS}");
    }
    let invalid =
        |reason: &dyn std::fmt::Display| anyhow!("invalid {name} {}: {reason}", shown(spec));
    if spec == "stdout" {
        return Ok(Checked::Stdout);
    }
    if let Some(path) = spec.strip_prefix("file:") {
        if path.is_empty() {
            return Err(invalid(
                &"file: needs a path, e.g. file:/var/lib/outbox/events.jsonl",
            ));
        }
        FilePublisher::check(path).map_err(|e| invalid(&e))?;
        return Ok(Checked::File(path.to_owned()));
    }
    if spec.starts_with("kafka://") {
        return kafka_config(spec, kafka).map_err(|e| invalid(&format!("{e:#}")));
    }
    if spec.starts_with("amqp://") || spec.starts_with("amqps://") {
        return amqp_config(spec, amqp).map_err(|e| invalid(&format!("{e:#}")));
    }
    bail!("unknown {name} {}: {FORMS}", shown(spec))
}

/// Builds the publisher named by `spec`; a broker's table from the config
/// file, if any, supplies its other settings (the spec's address wins).
pub fn from_config(
    spec: &str,
    kafka: Option<&toml::Table>,
    amqp: Option<&toml::Table>,
) -> Result<Arc<dyn Publisher>> {
    Ok(match check("publisher", spec, kafka, amqp)? {
        Checked::Stdout => Arc::new(StdoutPublisher),
        Checked::File(path) => Arc::new(
            FilePublisher::open(&path)
                .with_context(|| format!("cannot open --publisher file {}", shown(&path)))?,
        ),
        #[cfg(feature = "kafka")]
        Checked::Kafka(config) => Arc::new(outbox_publishers::kafka::KafkaPublisher::new(config)?),
        #[cfg(feature = "amqp")]
        Checked::Amqp(config) => Arc::new(outbox_publishers::amqp::AmqpPublisher::new(config)?),
    })
}

#[cfg(feature = "kafka")]
fn kafka_config(spec: &str, table: Option<&toml::Table>) -> Result<Checked> {
    use outbox_publishers::kafka::KafkaConfig;
    let brokers = KafkaConfig::from_url(spec)?.brokers;
    let mut config: KafkaConfig = match table {
        Some(t) => toml::Value::Table(t.clone())
            .try_into()
            .context("invalid [publisher.kafka]")?,
        None => KafkaConfig::default(),
    };
    config.brokers = brokers;
    config.validate()?;
    Ok(Checked::Kafka(config))
}

#[cfg(not(feature = "kafka"))]
fn kafka_config(_: &str, _: Option<&toml::Table>) -> Result<Checked> {
    bail!("this outbox was built without Kafka support: rebuild with --features kafka")
}

#[cfg(feature = "amqp")]
fn amqp_config(spec: &str, table: Option<&toml::Table>) -> Result<Checked> {
    use outbox_publishers::amqp::AmqpConfig;
    let mut config: AmqpConfig = match table {
        Some(t) => toml::Value::Table(t.clone())
            .try_into()
            .context("invalid [publisher.amqp]")?,
        None => AmqpConfig::default(),
    };
    config.url = spec.to_owned();
    config.validate()?;
    Ok(Checked::Amqp(config))
}

#[cfg(not(feature = "amqp"))]
fn amqp_config(_: &str, _: Option<&toml::Table>) -> Result<Checked> {
    bail!("this outbox was built without RabbitMQ support: rebuild with --features amqp")
}

/// `spec` as a message may show it: quoted, password hidden, cut to its
/// first 60 characters (with its length) if long.
pub(crate) fn shown(spec: &str) -> String {
    let hidden = crate::db::redact_text(spec);
    if spec.chars().count() <= 80 && hidden.chars().count() <= 80 {
        return format!("{hidden:?}");
    }
    let head: String = hidden.chars().take(60).collect();
    format!("{head:?}… ({} bytes)", spec.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(spec: &str) -> String {
        check("--publisher", spec, None, None)
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn broker_addresses_are_checked_without_connecting() {
        for spec in ["kafka://", "kafka://:::", "kafka://127.0.0.1:99999"] {
            let e = refused(spec);
            assert!(e.contains("--publisher") && e.contains("HOST:PORT"), "{e}");
        }
        assert!(check("--publisher", "kafka://127.0.0.1:9092", None, None).is_ok());
        let e = refused("amqp://u:hunter2@h:99999/v");
        assert!(e.contains("--publisher") && !e.contains("hunter2"), "{e}");
    }

    #[test]
    fn empty_unknown_and_long_specs_are_named_and_cut() {
        assert!(refused("").contains("--publisher is empty"));
        assert!(refused("null").starts_with("unknown --publisher"));
        assert!(refused("file:").contains("needs a path"));
        let long = format!("kafkaa://{}", "h".repeat(1 << 20));
        let e = refused(&long);
        assert!(e.len() < 600 && e.contains("(1048585 bytes)"), "{e}");
        let secret = format!("amqp://u:hunter2@{}", "h".repeat(100_000));
        let shown = shown(&secret);
        assert!(
            !shown.contains("hunter2") && shown.ends_with("(100017 bytes)"),
            "{shown}"
        );
    }
}
