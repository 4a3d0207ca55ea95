//! Many sources, as a config file holds them: the `[sources]` settings and
//! the `[[source]]` entries (resolved in [`super::source_entries`]).

use serde::{Deserialize, Serialize};

use super::publisher::PublisherConfig;

/// `[sources]`: how the relay of many sources behaves. Every key is
/// optional; without `[[source]]` entries nothing reads them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SourcesSettings {
    /// When `/readyz` answers 200: while `all` sources are healthy, or while
    /// `any` (at least one) is.
    pub ready: Readiness,
    /// Seconds between matches of the `schemas` patterns (also run at once
    /// after `outbox migrate`); 1 to 3600.
    pub rescan_secs: u64,
    /// Connections per database, the wake-up listener included; 2 to 1000.
    pub pool_size: u32,
    /// Milliseconds between the checks of dormant sources (one statement per
    /// database looking for work a wake-up missed and for due retries); 50
    /// to 600000.
    pub check_ms: u64,
}

impl Default for SourcesSettings {
    fn default() -> Self {
        SourcesSettings {
            ready: Readiness::All,
            rescan_secs: 30,
            pool_size: 10,
            check_ms: 1_000,
        }
    }
}

/// The ranges of the `[sources]` settings: (key, min, max).
pub const SETTINGS_RANGES: [(&str, u64, u64); 3] = [
    ("sources.rescan_secs", 1, 3_600),
    ("sources.pool_size", 2, 1_000),
    ("sources.check_ms", 50, 600_000),
];

impl SourcesSettings {
    /// The value of the ranged key `key` (one of [`SETTINGS_RANGES`]).
    pub fn ranged(&self, key: &str) -> u64 {
        match key {
            "sources.rescan_secs" => self.rescan_secs,
            "sources.pool_size" => u64::from(self.pool_size),
            _ => self.check_ms,
        }
    }
}

/// The readiness policy of a relay of many sources.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Readiness {
    /// Ready while every source is healthy.
    #[default]
    All,
    /// Ready while at least one source is healthy.
    Any,
}

/// One `[[source]]` entry as the file gives it. Resolved by
/// [`super::Config::sources`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SourceConfig {
    /// The source's name: 1 to 64 characters of `[A-Za-z0-9_.-]`, unique.
    pub name: String,
    /// Its database; unset: the top-level `database_url`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub database_url: Option<String>,
    /// The one schema it serves (exactly one of `schema` and `schemas`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schema: Option<String>,
    /// A pattern (`*` any run, `?` one character): every matching schema
    /// holding the outbox tables is a source, named `NAME/SCHEMA`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schemas: Option<String>,
    /// Overrides `relay.batch_size`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch_size: Option<usize>,
    /// Overrides `relay.max_attempts`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_attempts: Option<u32>,
    /// A whole publisher configuration (a spec string or a table shaped
    /// like `[publisher]`); unset: `[publisher]`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub publisher: Option<PublisherConfig>,
}
