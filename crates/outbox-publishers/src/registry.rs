//! The publishers there are, in one table: [`PUBLISHERS`]. Each
//! entry names the spec forms it takes (`kafka://`, `file:`, …), its
//! `[publisher.NAME]` table, if any, and one function that checks the spec
//! and the table without connecting and returns how to build the publisher.
//! `--publisher --help`, `outbox config check` and the "unknown publisher"
//! error list the forms from this table; adding a publisher is adding an
//! entry (and its function).
//!
//! [`check`] is the one validation of these settings. Loading the
//! configuration runs it for every command, so `outbox config check` and
//! `outbox relay` accept and refuse exactly the same publishers;
//! [`from_config`] then only opens or connects what it accepted.
//!
//! Longer than most files on purpose: it is the one table of publishers,
//! with each entry's check beside it.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::{Envelope, FilePublisher, StdoutPublisher};
use anyhow::{anyhow, bail, Context, Result};
use outbox::Publisher;

/// The `[publisher.NAME]` tables of a configuration, by `NAME`.
pub type Tables = BTreeMap<String, toml::Table>;

/// How to build a publisher whose settings were checked, with its message
/// format.
type Build = Box<dyn FnOnce(Envelope) -> Result<Arc<dyn Publisher>> + Send>;

/// One kind of publisher.
pub struct Kind {
    /// Its name: the `[publisher.NAME]` table and the cargo feature.
    pub name: &'static str,
    /// What a spec of this kind starts with (`kafka://`, `file:`), or the
    /// whole spec (`stdout`).
    pub prefixes: &'static [&'static str],
    /// The spec's form, as help and errors show it.
    pub form: &'static str,
    /// Whether it reads a `[publisher.NAME]` table.
    pub table: bool,
    /// Checks `spec` and the table without opening or connecting anything.
    check: fn(spec: &str, table: Option<&toml::Table>) -> Result<Build>,
}

/// Every publisher, in the order help lists them.
pub const PUBLISHERS: &[Kind] = &[
    Kind {
        name: "stdout",
        prefixes: &["stdout"],
        form: "stdout",
        table: false,
        check: stdout,
    },
    Kind {
        name: "file",
        prefixes: &["file:"],
        form: "file:PATH",
        table: false,
        check: file,
    },
    Kind {
        name: "kafka",
        prefixes: &["kafka://"],
        form: "kafka://HOST:PORT[,HOST:PORT…]",
        table: true,
        check: kafka,
    },
    Kind {
        name: "amqp",
        prefixes: &["amqp://", "amqps://"],
        form: "amqp[s]://USER:PASS@HOST:PORT/VHOST",
        table: true,
        check: amqp,
    },
    Kind {
        name: "nats",
        prefixes: &["nats://"],
        form: "nats://HOST:PORT[,HOST:PORT…]",
        table: true,
        check: nats,
    },
    Kind {
        name: "redis",
        // rediss:// is taken to say that TLS is not supported.
        prefixes: &["redis://", "rediss://"],
        // USER:PASS@ and /DB are optional; this form survives redaction.
        form: "redis://USER:PASS@HOST:PORT/DB",
        table: true,
        check: redis,
    },
    Kind {
        name: "sqs",
        prefixes: &["sqs://"],
        // Or sqs:// and the queue URL.
        form: "sqs://QUEUE_NAME",
        table: true,
        check: sqs,
    },
    Kind {
        name: "sns",
        prefixes: &["sns://"],
        form: "sns://TOPIC_ARN",
        table: true,
        check: sns,
    },
    Kind {
        name: "http",
        prefixes: &["http://", "https://"],
        form: "http[s]://HOST[:PORT]/PATH",
        table: true,
        check: http,
    },
];

impl Kind {
    /// Whether `spec` is of this kind.
    fn takes(&self, spec: &str) -> bool {
        self.prefixes.iter().any(|p| {
            spec == *p || ((p.ends_with(':') || p.ends_with("://")) && spec.starts_with(p))
        })
    }
}

/// The publisher `spec` names, if any.
pub fn kind_of(spec: &str) -> Option<&'static Kind> {
    PUBLISHERS.iter().find(|k| k.takes(spec))
}

/// The `[publisher.NAME]` tables there are.
pub fn table_names() -> impl Iterator<Item = &'static str> {
    PUBLISHERS.iter().filter(|k| k.table).map(|k| k.name)
}

/// Every spec form: `use stdout, file:PATH, … or …`.
pub fn forms() -> String {
    let all: Vec<&str> = PUBLISHERS.iter().map(|k| k.form).collect();
    match all.split_last() {
        Some((last, rest)) if !rest.is_empty() => format!("use {} or {last}", rest.join(", ")),
        _ => format!("use {}", all.join("")),
    }
}

/// The help of `--publisher`.
pub fn help() -> String {
    format!(
        "Where to publish: {}; http[s] needs a whsec_ secret in OUTBOX_PUBLISHER_HTTP_SECRET or [publisher.http] [env: OUTBOX_PUBLISHER] [default: stdout]",
        forms().trim_start_matches("use ")
    )
}

/// A publisher whose settings passed [`check`]; nothing is open yet.
pub struct Checked {
    /// Which publisher.
    pub kind: &'static Kind,
    build: Build,
}

impl std::fmt::Debug for Checked {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Checked")
            .field("kind", &self.kind.name)
            .finish_non_exhaustive()
    }
}

/// Validates `spec` and the table of its publisher, without opening,
/// creating or connecting to anything. `name` is the setting as the user
/// wrote it (`--publisher`, `OUTBOX_PUBLISHER`, `publisher (FILE:LINE)`).
pub fn check(name: &str, spec: &str, tables: &Tables) -> Result<Checked> {
    if spec.trim().is_empty() {
        bail!("{name} is empty: {}", forms());
    }
    let Some(kind) = kind_of(spec) else {
        bail!("unknown {name} {}: {}", shown(spec), forms())
    };
    let table = tables.get(kind.name).filter(|_| kind.table);
    let build =
        (kind.check)(spec, table).map_err(|e| anyhow!("invalid {name} {}: {e:#}", shown(spec)))?;
    Ok(Checked { kind, build })
}

/// Builds the publisher named by `spec`; its table from the config file, if
/// any, supplies its other settings (the spec's address wins). Messages
/// follow `envelope`.
pub fn from_config(spec: &str, tables: &Tables, envelope: Envelope) -> Result<Arc<dyn Publisher>> {
    (check("publisher", spec, tables)?.build)(envelope)
}

/// `[publisher.NAME]` as `C`, or `C`'s defaults. A value quoted by the
/// error is hidden if its key names a secret.
#[allow(dead_code)] // unused in builds without any broker
fn settings<C: serde::de::DeserializeOwned + Default>(
    name: &str,
    table: Option<&toml::Table>,
) -> Result<C> {
    let Some(t) = table else {
        return Ok(C::default());
    };
    toml::Value::Table(t.clone()).try_into().map_err(|e| {
        let mut text = e.to_string();
        hide_secrets(t, &mut text);
        anyhow!("invalid [publisher.{name}]: {text}")
    })
}

/// Replaces in `text` every value of `table` (at any depth) under a key
/// that names a secret.
fn hide_secrets(table: &toml::Table, text: &mut String) {
    for (key, value) in table {
        if outbox::redact::is_secret_key(key) {
            let shown = match value {
                toml::Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            if !shown.is_empty() {
                *text = text.replace(&shown, outbox::redact::REDACTED);
            }
        } else if let toml::Value::Table(inner) = value {
            hide_secrets(inner, text);
        }
    }
}

#[allow(dead_code)] // unused in builds with every broker
fn not_built(name: &str) -> Result<Build> {
    bail!("this outbox was built without {name} support: rebuild with --features {name}")
}

fn stdout(_: &str, _: Option<&toml::Table>) -> Result<Build> {
    Ok(Box::new(|envelope: Envelope| {
        if envelope.is_plain() {
            return Ok(Arc::new(StdoutPublisher) as Arc<dyn Publisher>);
        }
        Ok(Arc::new(StdoutPublisher::with_envelope(envelope)) as Arc<dyn Publisher>)
    }))
}

fn file(spec: &str, _: Option<&toml::Table>) -> Result<Build> {
    let path = spec.strip_prefix("file:").unwrap_or(spec).to_owned();
    if path.is_empty() {
        bail!("file: needs a path, e.g. file:/var/lib/outbox/events.jsonl");
    }
    FilePublisher::check(&path)?;
    Ok(Box::new(move |envelope| {
        let p = FilePublisher::open(&path)
            .with_context(|| format!("cannot open --publisher file {}", shown(&path)))?;
        Ok(Arc::new(p.with_envelope(envelope)) as Arc<dyn Publisher>)
    }))
}

/// Defines `$name`, the check of a publisher built with cargo feature
/// `$feature`, as `$body`; in a build without that feature `$name` refuses
/// every spec, saying how to rebuild.
macro_rules! behind_feature {
    ($feature:literal, fn $name:ident($spec:ident, $table:ident) $body:block) => {
        #[cfg(feature = $feature)]
        fn $name($spec: &str, $table: Option<&toml::Table>) -> Result<Build> $body

        #[cfg(not(feature = $feature))]
        fn $name(_: &str, _: Option<&toml::Table>) -> Result<Build> {
            not_built($feature)
        }
    };
}

/// The [`Build`] of the publisher `make` makes for a message format.
#[allow(dead_code)] // unused in builds without any broker
fn building<P: Publisher + 'static>(
    make: impl FnOnce(Envelope) -> Result<P> + Send + 'static,
) -> Result<Build> {
    Ok(Box::new(|envelope| {
        Ok(Arc::new(make(envelope)?) as Arc<dyn Publisher>)
    }))
}

behind_feature!("kafka", fn kafka(spec, table) {
    use crate::kafka::{KafkaConfig, KafkaPublisher};
    let mut config: KafkaConfig = settings("kafka", table)?;
    config.brokers = KafkaConfig::from_url(spec)?.brokers;
    config.validate()?;
    kafka_properties_accepted(&config)?;
    building(|envelope| Ok(KafkaPublisher::new(config)?.with_envelope(envelope)))
});

/// Asks librdkafka whether it takes every one of `config`'s properties
/// (names and values), without creating a client: creating a producer
/// connects to the brokers at once.
#[cfg(feature = "kafka")]
fn kafka_properties_accepted(config: &crate::kafka::KafkaConfig) -> Result<()> {
    let mut client = rdkafka::ClientConfig::new();
    client.set("bootstrap.servers", config.brokers.join(","));
    for (name, value) in &config.properties {
        client.set(name, value);
    }
    client.create_native_config().map(|_| ()).map_err(|e| {
        let mut text = e.to_string();
        for (name, value) in &config.properties {
            if outbox::redact::is_secret_key(name) && !value.is_empty() {
                text = text.replace(value.as_str(), outbox::redact::REDACTED);
            }
        }
        anyhow!("librdkafka refuses [publisher.kafka] properties: {text}")
    })
}

/// Defines `$name` (module `crate::$name`, cargo feature
/// `$feature`) as the check of a publisher whose spec is its `url`: the
/// `[publisher.NAME]` table as `$config`, the spec as its `url`, validated,
/// then built as `$publisher`.
macro_rules! url_publisher {
    ($name:ident, $feature:literal, $config:ident, $publisher:ident) => {
        behind_feature!($feature, fn $name(spec, table) {
            use crate::$name::{$config, $publisher};
            let mut config: $config = settings($feature, table)?;
            config.url = spec.to_owned();
            config.validate()?;
            building(|envelope| Ok($publisher::new(config)?.with_envelope(envelope)))
        });
    };
}

url_publisher!(amqp, "amqp", AmqpConfig, AmqpPublisher);

behind_feature!("nats", fn nats(spec, table) {
    use crate::nats::{NatsConfig, NatsPublisher};
    let mut config: NatsConfig = settings("nats", table)?;
    config.apply_url(spec)?;
    // Built now (nothing connects): it reads and checks the credentials
    // file, so that config check refuses a broken one too.
    let publisher = NatsPublisher::new(config)?;
    building(|envelope| Ok(publisher.with_envelope(envelope)))
});

url_publisher!(redis, "redis", RedisConfig, RedisPublisher);

behind_feature!("http", fn http(spec, table) {
    use crate::http::{HttpPublisher, SECRET_ENV};
    let secret = std::env::var(SECRET_ENV).ok().filter(|s| !s.is_empty());
    let config = http_config(spec, table, secret)?;
    building(|envelope| Ok(HttpPublisher::new(config)?.with_envelope(envelope)))
});

/// `[publisher.http]` for `spec`, the secret from the environment winning
/// over the table's.
#[cfg(feature = "http")]
fn http_config(
    spec: &str,
    table: Option<&toml::Table>,
    env_secret: Option<String>,
) -> Result<crate::http::HttpConfig> {
    let mut config: crate::http::HttpConfig = settings("http", table)?;
    config.url = spec.to_owned();
    if env_secret.is_some() {
        config.secret = env_secret;
    }
    config.validate()?;
    Ok(config)
}

behind_feature!("sqs", fn sqs(spec, table) {
    use crate::sqs::{SqsConfig, SqsPublisher};
    let mut config: SqsConfig = settings("sqs", table)?;
    config.apply_spec(spec)?;
    building(|envelope| Ok(SqsPublisher::new(config)?.with_envelope(envelope)))
});

// SNS is built with the `sqs` feature.
behind_feature!("sqs", fn sns(spec, table) {
    use crate::sqs::{SnsConfig, SnsPublisher};
    let mut config: SnsConfig = settings("sns", table)?;
    config.apply_spec(spec)?;
    building(|envelope| Ok(SnsPublisher::new(config)?.with_envelope(envelope)))
});

/// `spec` as a message may show it: quoted, password hidden, cut to its
/// first 60 characters (with its length) if long.
pub fn shown(spec: &str) -> String {
    let hidden = outbox::redact::redact_text(spec);
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
        check("--publisher", spec, &Tables::new())
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn broker_addresses_are_checked_without_connecting() {
        for spec in ["kafka://", "kafka://:::", "kafka://127.0.0.1:99999"] {
            let e = refused(spec);
            assert!(e.contains("--publisher") && e.contains("HOST:PORT"), "{e}");
        }
        assert!(check("--publisher", "kafka://127.0.0.1:9092", &Tables::new()).is_ok());
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

    #[test]
    fn help_and_errors_list_every_publisher_of_the_table() {
        let unknown = refused("nats2://x");
        for kind in PUBLISHERS {
            assert!(help().contains(kind.form), "{}", help());
            assert!(unknown.contains(kind.form), "{unknown}");
            for prefix in kind.prefixes {
                let spec = match prefix.ends_with(':') || prefix.ends_with("://") {
                    true => format!("{prefix}x"),
                    false => prefix.to_string(),
                };
                assert_eq!(kind_of(&spec).map(|k| k.name), Some(kind.name));
            }
        }
        assert!(
            forms().starts_with("use stdout, file:PATH, "),
            "{}",
            forms()
        );
        assert_eq!(kind_of("HTTPS://h/x").map(|k| k.name), None);
        assert_eq!(kind_of("stdoutx").map(|k| k.name), None);
        let tables: Vec<_> = table_names().collect();
        for name in ["kafka", "amqp", "nats", "redis", "sqs", "sns", "http"] {
            assert!(tables.contains(&name), "{tables:?}");
        }
    }

    #[test]
    fn nats_and_redis_specs_are_checked_without_connecting() {
        for spec in [
            "nats://",
            "nats://127.0.0.1:99999",
            "nats://u:hunter2@h:x",
            "redis://",
            "redis://u:hunter2@h:99999",
            "redis://h:6379/x",
            "rediss://u:hunter2@h:6379",
        ] {
            let e = refused(spec);
            assert!(
                e.starts_with("invalid --publisher") && !e.contains("hunter2"),
                "{spec}: {e}"
            );
        }
        let table = |t: &str| -> Tables {
            let (name, body) = t.split_once('\n').unwrap();
            Tables::from([(name.to_owned(), toml::from_str(body).unwrap())])
        };
        for (spec, tables) in [
            ("nats://127.0.0.1:4222,127.0.0.1:4223", Tables::new()),
            ("nats://relay:hunter2@127.0.0.1:4222", Tables::new()),
            (
                "nats://127.0.0.1:4222",
                table("nats\nno_stream = \"reject\""),
            ),
            ("redis://127.0.0.1:6379/1", table("redis\nmaxlen = 1000")),
        ] {
            let checked = check("--publisher", spec, &tables);
            assert!(checked.is_ok(), "{spec}: {checked:?}");
        }
        let e = check(
            "--publisher",
            "nats://127.0.0.1:4222",
            &table("nats\npassword = \"hunter2\"\nuser = 1"),
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("[publisher.nats]") && !e.contains("hunter2"),
            "{e}"
        );
    }

    #[cfg(feature = "sqs")]
    #[test]
    fn sqs_and_sns_specs_are_checked_without_calling_aws() {
        for spec in [
            "sqs://",
            "sqs://orders.events",
            "sqs://https://sqs.us-east-1.amazonaws.com/",
            "sns://",
            "sns://orders",
        ] {
            let e = refused(spec);
            assert!(
                e.starts_with("invalid --publisher") && e.lines().count() == 1,
                "{spec}: {e}"
            );
        }
        let table = |name: &str, t: &str| -> Tables {
            Tables::from([(name.to_owned(), toml::from_str(t).unwrap())])
        };
        for (spec, tables) in [
            ("sqs://orders.fifo", Tables::new()),
            (
                "sqs://https://sqs.eu-west-1.amazonaws.com/123456789012/orders",
                table("sqs", "max_concurrent_calls = 4"),
            ),
            (
                "sns://arn:aws:sns:us-east-1:123456789012:orders.fifo",
                table("sns", "region = \"us-east-1\""),
            ),
        ] {
            let checked = check("--publisher", spec, &tables);
            assert!(checked.is_ok(), "{spec}: {checked:?}");
        }
        let e = check(
            "--publisher",
            "sqs://orders",
            &table("sqs", "queue_url = \"x\""),
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("[publisher.sqs]") && e.contains("queue_url"),
            "{e}"
        );
    }

    #[cfg(feature = "http")]
    #[test]
    fn webhook_specs_need_a_whsec_secret_that_is_never_shown() {
        const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
        let table = |t: &str| -> Option<toml::Table> { Some(toml::from_str(t).unwrap()) };
        let ok = http_config("https://hooks.example.com/x", None, Some(SECRET.into())).unwrap();
        assert_eq!(ok.secret.as_deref(), Some(SECRET));
        let from_file = table(&format!("secret = \"{SECRET}\"\ntimeout_ms = 2000"));
        let c = http_config("http://h:1/x", from_file.as_ref(), None).unwrap();
        assert_eq!((c.url.as_str(), c.timeout_ms), ("http://h:1/x", 2000));
        let e = format!("{:#}", http_config("http://h/x", None, None).unwrap_err());
        assert!(
            e.contains("secret") && e.contains("OUTBOX_PUBLISHER_HTTP_SECRET"),
            "{e}"
        );
        for bad in ["hunter2hunter2", "whsec_hunter2!!", "whsec_aHVudGVyMg=="] {
            let e = format!(
                "{:#}",
                http_config("http://h/x", None, Some(bad.into())).unwrap_err()
            );
            assert!(
                e.contains("secret") && !e.contains("hunter2") && !e.contains("aHVudGVy"),
                "{e}"
            );
        }
        let typed = table("secret = 123456789\n");
        let e = format!(
            "{:#}",
            http_config("http://h/x", typed.as_ref(), None).unwrap_err()
        );
        assert!(!e.contains("123456789"), "{e}");
        let e = format!(
            "{:#}",
            http_config("http://u:hunter2@h:99999/x", None, Some(SECRET.into())).unwrap_err()
        );
        assert!(e.contains("url") && !e.contains("hunter2"), "{e}");
        let e = refused("http://u:hunter2@h:99999/x");
        assert!(
            e.starts_with("invalid --publisher") && !e.contains("hunter2"),
            "{e}"
        );
    }
}
