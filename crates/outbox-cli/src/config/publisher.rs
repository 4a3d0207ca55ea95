//! `publisher`: the spec and the publishers' own tables, as a file holds
//! them (a string or a table).

use std::fmt;

use serde::de::{self, MapAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize};

/// The publisher: a spec (`stdout`, `file:PATH`, `kafka://…`, `http://…`,
/// see [`outbox_publishers::registry::PUBLISHERS`]) and the publishers' own settings,
/// kept as tables and handed to the publisher as they are. In a file it is
/// either a string (`publisher = "stdout"`) or a table (`[publisher]` with
/// `spec`, and `[publisher.NAME]` tables such as `[publisher.kafka]`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PublisherConfig {
    /// Where to publish.
    pub spec: String,
    /// The message format: `plain`, `cloudevents-binary` or
    /// `cloudevents-structured`.
    pub format: String,
    /// The CloudEvents `source` attribute; `{schema}` is replaced by the
    /// schema's name.
    pub cloudevents_source: String,
    /// `[publisher.NAME]`: a publisher's own settings, by `NAME` (one of
    /// [`outbox_publishers::registry::table_names`]).
    #[serde(flatten)]
    pub tables: outbox_publishers::registry::Tables,
}

impl Default for PublisherConfig {
    fn default() -> Self {
        PublisherConfig {
            spec: "stdout".to_owned(),
            format: outbox_publishers::Format::Plain.name().to_owned(),
            cloudevents_source: outbox_publishers::cloudevents::DEFAULT_SOURCE.to_owned(),
            tables: Default::default(),
        }
    }
}

/// The keys of a `[publisher]` table: its settings and the publishers'
/// tables.
fn publisher_keys() -> &'static [&'static str] {
    static KEYS: std::sync::OnceLock<Vec<&'static str>> = std::sync::OnceLock::new();
    KEYS.get_or_init(|| {
        ["spec", "format", "cloudevents_source"]
            .into_iter()
            .chain(outbox_publishers::registry::table_names())
            .collect()
    })
}

impl<'de> Deserialize<'de> for PublisherConfig {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct SpecOrTable;
        impl<'de> Visitor<'de> for SpecOrTable {
            type Value = PublisherConfig;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(
                    "a publisher spec such as \"stdout\" or \"file:PATH\", or a [publisher] table",
                )
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<PublisherConfig, E> {
                Ok(PublisherConfig {
                    spec: v.to_owned(),
                    ..PublisherConfig::default()
                })
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<PublisherConfig, A::Error> {
                let mut config = PublisherConfig::default();
                while let Some(key) = map.next_key::<String>()? {
                    if key == "spec" {
                        config.spec = map.next_value()?;
                    } else if key == "format" {
                        config.format = map.next_value()?;
                    } else if key == "cloudevents_source" {
                        config.cloudevents_source = map.next_value()?;
                    } else if publisher_keys().contains(&key.as_str()) {
                        let table: toml::Table = map.next_value()?;
                        config.tables.insert(key, table);
                    } else {
                        return Err(de::Error::unknown_field(&key, publisher_keys()));
                    }
                }
                Ok(config)
            }
        }
        deserializer.deserialize_any(SpecOrTable)
    }
}

#[cfg(test)]
mod tests {
    use crate::config::Config;

    #[test]
    fn publisher_is_a_string_or_a_table() {
        let c: Config = toml::from_str("publisher = \"file:/tmp/x\"").unwrap();
        assert_eq!(c.publisher.spec, "file:/tmp/x");
        let c: Config = toml::from_str(
            "[publisher]\nspec = \"kafka://k:9092\"\n[publisher.kafka]\nclient_id = \"a\"\n",
        )
        .unwrap();
        assert_eq!(c.publisher.spec, "kafka://k:9092");
        assert_eq!(
            c.publisher.tables.get("kafka").unwrap()["client_id"].as_str(),
            Some("a")
        );
        let err = toml::from_str::<Config>("[publisher]\nspek = \"x\"\n").unwrap_err();
        assert!(err.message().contains("spek"), "{err}");
        let err = toml::from_str::<Config>("[publisher.kafak]\nclient_id = \"a\"\n").unwrap_err();
        assert!(
            err.message().contains("kafak") && err.message().contains("http"),
            "the publishers' tables are listed: {err}"
        );
    }
}
