//! Every scalar setting: its dotted key in the file, its environment
//! variables and its flag. The publishers' tables, passed through whole
//! (`[publisher.kafka]`, `[publisher.http]`, …), are file-only.

/// How an environment variable's text becomes a TOML value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Taken as it is.
    Str,
    /// A whole number.
    Int,
    /// `true`/`false` (also `1`/`0`, `yes`/`no`, `on`/`off`).
    Bool,
}

/// One setting.
#[derive(Debug, Clone, Copy)]
pub struct Key {
    /// The dotted key in the config file, e.g. `relay.batch_size`.
    pub path: &'static str,
    /// The value's kind.
    pub kind: Kind,
    /// Environment variables, strongest first.
    pub env: &'static [&'static str],
    /// The command-line flag, if there is one (the docs test checks that
    /// each is documented).
    #[cfg_attr(not(test), allow(dead_code))]
    pub flag: Option<&'static str>,
}

const fn key(
    path: &'static str,
    kind: Kind,
    env: &'static [&'static str],
    flag: Option<&'static str>,
) -> Key {
    Key {
        path,
        kind,
        env,
        flag,
    }
}

use Kind::{Bool, Int, Str};

/// All scalar settings, in the order `outbox config check` prints them.
pub const KEYS: &[Key] = &[
    key(
        "database_url",
        Str,
        &["OUTBOX_DATABASE_URL", "DATABASE_URL"],
        Some("--database-url"),
    ),
    key("schema", Str, &["OUTBOX_SCHEMA"], Some("--schema")),
    key(
        "shutdown_timeout_secs",
        Int,
        &["OUTBOX_SHUTDOWN_TIMEOUT_SECS"],
        Some("--shutdown-timeout-secs"),
    ),
    key("drain", Bool, &["OUTBOX_DRAIN"], Some("--drain")),
    key(
        "publisher.spec",
        Str,
        &["OUTBOX_PUBLISHER"],
        Some("--publisher"),
    ),
    key(
        "publisher.format",
        Str,
        &["OUTBOX_PUBLISHER_FORMAT"],
        Some("--format"),
    ),
    key(
        "publisher.cloudevents_source",
        Str,
        &["OUTBOX_PUBLISHER_CLOUDEVENTS_SOURCE"],
        Some("--cloudevents-source"),
    ),
    key("http.addr", Str, &["OUTBOX_HTTP_ADDR"], Some("--http-addr")),
    key("http.refresh_ms", Int, &["OUTBOX_HTTP_REFRESH_MS"], None),
    key(
        "http.check_timeout_ms",
        Int,
        &["OUTBOX_HTTP_CHECK_TIMEOUT_MS"],
        None,
    ),
    key("log.level", Str, &["OUTBOX_LOG_LEVEL"], Some("--log-level")),
    key(
        "log.format",
        Str,
        &["OUTBOX_LOG_FORMAT"],
        Some("--log-format"),
    ),
    key(
        "tracing.otlp_endpoint",
        Str,
        &[
            "OUTBOX_TRACING_OTLP_ENDPOINT",
            "OTEL_EXPORTER_OTLP_ENDPOINT",
        ],
        None,
    ),
    key(
        "tracing.service_name",
        Str,
        &["OUTBOX_TRACING_SERVICE_NAME", "OTEL_SERVICE_NAME"],
        None,
    ),
    key(
        "relay.instance_id",
        Str,
        &["OUTBOX_RELAY_INSTANCE_ID"],
        Some("--instance-id"),
    ),
    key(
        "relay.batch_size",
        Int,
        &["OUTBOX_RELAY_BATCH_SIZE"],
        Some("--batch-size"),
    ),
    key(
        "relay.max_attempts",
        Int,
        &["OUTBOX_RELAY_MAX_ATTEMPTS"],
        Some("--max-attempts"),
    ),
    key(
        "relay.backoff_base_ms",
        Int,
        &["OUTBOX_RELAY_BACKOFF_BASE_MS"],
        Some("--backoff-base-ms"),
    ),
    key(
        "relay.backoff_max_ms",
        Int,
        &["OUTBOX_RELAY_BACKOFF_MAX_MS"],
        None,
    ),
    key(
        "relay.lease_ms",
        Int,
        &["OUTBOX_RELAY_LEASE_MS"],
        Some("--lease-ms"),
    ),
    key(
        "relay.poll_min_ms",
        Int,
        &["OUTBOX_RELAY_POLL_MIN_MS"],
        None,
    ),
    key(
        "relay.poll_max_ms",
        Int,
        &["OUTBOX_RELAY_POLL_MAX_MS"],
        Some("--poll-max-ms"),
    ),
    key(
        "relay.latency_budget_ms",
        Int,
        &["OUTBOX_RELAY_LATENCY_BUDGET_MS"],
        Some("--latency-budget-ms"),
    ),
    key(
        "relay.outage_backoff_max_ms",
        Int,
        &["OUTBOX_RELAY_OUTAGE_BACKOFF_MAX_MS"],
        None,
    ),
    key(
        "relay.publish_timeout_ms",
        Int,
        &["OUTBOX_RELAY_PUBLISH_TIMEOUT_MS"],
        None,
    ),
    key(
        "relay.retention",
        Str,
        &["OUTBOX_RELAY_RETENTION"],
        Some("--keep-processed"),
    ),
    key("relay.listen", Bool, &["OUTBOX_RELAY_LISTEN"], None),
    key(
        "cleaner.events_retention_secs",
        Int,
        &["OUTBOX_CLEANER_EVENTS_RETENTION_SECS"],
        None,
    ),
    key(
        "cleaner.inbox_retention_secs",
        Int,
        &["OUTBOX_CLEANER_INBOX_RETENTION_SECS"],
        None,
    ),
    key(
        "cleaner.interval_secs",
        Int,
        &["OUTBOX_CLEANER_INTERVAL_SECS"],
        None,
    ),
    key(
        "cleaner.batch_size",
        Int,
        &["OUTBOX_CLEANER_BATCH_SIZE"],
        None,
    ),
    key("sources.ready", Str, &["OUTBOX_SOURCES_READY"], None),
    key(
        "sources.rescan_secs",
        Int,
        &["OUTBOX_SOURCES_RESCAN_SECS"],
        None,
    ),
    key(
        "sources.pool_size",
        Int,
        &["OUTBOX_SOURCES_POOL_SIZE"],
        None,
    ),
    key("sources.check_ms", Int, &["OUTBOX_SOURCES_CHECK_MS"], None),
];

/// Prefixes of variables that belong to the configuration: an unknown
/// variable under one of them is a typo and is refused.
pub const RESERVED_ENV_PREFIXES: &[&str] = &[
    "OUTBOX_RELAY_",
    "OUTBOX_HTTP_",
    "OUTBOX_LOG_",
    "OUTBOX_TRACING_",
    "OUTBOX_CLEANER_",
    "OUTBOX_SOURCES_",
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_names_follow_the_keys() {
        for k in KEYS {
            let derived = format!("OUTBOX_{}", k.path.replace('.', "_").to_uppercase());
            let expected = match k.path {
                "publisher.spec" => "OUTBOX_PUBLISHER".to_owned(),
                _ => derived,
            };
            assert_eq!(k.env[0], expected, "{}", k.path);
        }
    }
}
