//! The configuration's shape: what a config file may hold, with defaults.
//! The same structs hold the effective configuration once every layer is
//! applied.

use outbox::{CleanerConfig, RelayConfig};

use serde::{Deserialize, Serialize};

use super::publisher::PublisherConfig;
use super::sources::{SourceConfig, SourcesSettings};

/// The whole configuration. Every field is optional in a file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// PostgreSQL URL, `postgres://USER:PASS@HOST:PORT/DB`.
    pub database_url: Option<String>,
    /// Schema holding the outbox tables.
    pub schema: String,
    /// Seconds the relay may take to stop gracefully after SIGTERM/SIGINT.
    pub shutdown_timeout_secs: u64,
    /// Exit 0 once nothing is pending (`outbox relay` only).
    pub drain: bool,
    /// Where events go.
    pub publisher: PublisherConfig,
    /// The `/metrics`, `/healthz` and `/readyz` server.
    pub http: HttpConfig,
    /// Logging.
    pub log: LogConfig,
    /// OpenTelemetry export of the relay's publish spans.
    pub tracing: TracingConfig,
    /// The relay engine's settings (the library's `RelayConfig`).
    pub relay: RelayConfig,
    /// Retention mode's cleaner (the library's `CleanerConfig`); runs inside
    /// `outbox relay` when `relay.retention = "keep"`.
    pub cleaner: CleanerConfig,
    /// `[sources]`: the settings of a relay of many sources.
    #[serde(rename = "sources")]
    pub sources_settings: SourcesSettings,
    /// `[[source]]` entries as written; [`Config::sources`] resolves them.
    /// None: one source, `database_url` and `schema`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub source: Vec<SourceConfig>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            database_url: None,
            schema: "public".to_owned(),
            shutdown_timeout_secs: 30,
            drain: false,
            publisher: PublisherConfig::default(),
            http: HttpConfig::default(),
            log: LogConfig::default(),
            tracing: TracingConfig::default(),
            relay: RelayConfig::default(),
            cleaner: CleanerConfig::default(),
            sources_settings: SourcesSettings::default(),
            source: Vec::new(),
        }
    }
}

impl Config {
    /// The message format: `[publisher] format`, and for CloudEvents the
    /// `source` with `{schema}` filled in. The values were checked when the
    /// configuration was loaded.
    pub fn envelope(&self) -> anyhow::Result<outbox_publishers::Envelope> {
        let p = &self.publisher;
        let format: outbox_publishers::Format =
            p.format.parse().map_err(|e: String| anyhow::anyhow!(e))?;
        let source =
            outbox_publishers::cloudevents::source_for(&p.cloudevents_source, &self.schema);
        Ok(outbox_publishers::Envelope::new(format, source))
    }
}

/// The HTTP server for metrics and health checks.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HttpConfig {
    /// `HOST:PORT` to listen on; no server when unset.
    pub addr: Option<String>,
    /// How often the gauges read from the database are refreshed.
    pub refresh_ms: u64,
    /// How long each readiness check may take.
    pub check_timeout_ms: u64,
}

impl Default for HttpConfig {
    fn default() -> Self {
        HttpConfig {
            addr: None,
            refresh_ms: 5_000,
            check_timeout_ms: 2_000,
        }
    }
}

/// Log output.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct LogConfig {
    /// A level (`error` … `trace`) or a `RUST_LOG`-style filter. Unset:
    /// `info` for `outbox relay`, `warn` for other commands.
    pub level: Option<String>,
    /// `text` or `json`.
    pub format: LogFormat,
}

/// OpenTelemetry: where `outbox relay` exports its publish spans (OTLP
/// over HTTP/protobuf). No endpoint: no exporter, no publish spans, and
/// every stored `traceparent` forwarded unchanged.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct TracingConfig {
    /// The collector's base URL, e.g. `http://127.0.0.1:4318`; spans go to
    /// `/v1/traces` under it.
    pub otlp_endpoint: Option<String>,
    /// The `service.name` of the exported spans; unset: `outbox`.
    pub service_name: Option<String>,
}

/// Log line format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

impl LogFormat {
    /// Every format's name, as files and flags take them.
    pub const NAMES: [&'static str; 2] = [LogFormat::Text.as_str(), LogFormat::Json.as_str()];

    /// The name used in files and flags.
    pub const fn as_str(self) -> &'static str {
        match self {
            LogFormat::Text => "text",
            LogFormat::Json => "json",
        }
    }
}
