//! Settings from command-line flags: the strongest layer.

use std::collections::BTreeMap;

use super::model::LogFormat;
use super::set_path;
use crate::cli::{Global, RelayArgs, SCHEMA_UNSET};

/// The settings given as flags.
#[derive(Debug, Clone, Default)]
pub struct FlagLayer {
    /// Values by dotted key.
    pub table: toml::Table,
    /// The flag each key came from.
    pub flags: BTreeMap<String, &'static str>,
}

impl FlagLayer {
    fn set(&mut self, path: &str, flag: &'static str, value: impl Into<toml::Value>) {
        set_path(&mut self.table, path, value.into());
        self.flags.insert(path.to_owned(), flag);
    }

    fn set_int(&mut self, path: &str, flag: &'static str, value: Option<u64>) {
        if let Some(v) = value {
            // Beyond i64 cannot be stored in TOML; saturate so range
            // validation reports it.
            self.set(path, flag, i64::try_from(v).unwrap_or(i64::MAX));
        }
    }
}

/// The flags that were given (absent flags set nothing).
pub fn from_cli(global: &Global, relay: Option<&RelayArgs>) -> FlagLayer {
    let mut l = FlagLayer::default();
    if let Some(url) = &global.database_url {
        l.set("database_url", "--database-url", url.as_str());
    }
    // An explicit `--schema ''` is set, and refused by validation.
    if global.schema != SCHEMA_UNSET {
        l.set("schema", "--schema", global.schema.as_str());
    }
    if let Some(level) = &global.log_level {
        l.set("log.level", "--log-level", level.as_str());
    }
    if global.log_json {
        l.set("log.format", "--log-json", LogFormat::Json.as_str());
    }
    if let Some(format) = global.log_format {
        l.set("log.format", "--log-format", format.as_str());
    }
    let Some(a) = relay else {
        return l;
    };
    if let Some(p) = &a.publisher {
        l.set("publisher.spec", "--publisher", p.as_str());
    }
    if let Some(f) = &a.format {
        l.set("publisher.format", "--format", f.as_str());
    }
    if let Some(source) = &a.cloudevents_source {
        l.set(
            "publisher.cloudevents_source",
            "--cloudevents-source",
            source.as_str(),
        );
    }
    if a.drain {
        l.set("drain", "--drain", true);
    }
    if let Some(v) = &a.instance_id {
        l.set("relay.instance_id", "--instance-id", v.as_str());
    }
    l.set_int(
        "relay.batch_size",
        "--batch-size",
        a.batch_size.map(|v| v as u64),
    );
    l.set_int(
        "relay.max_attempts",
        "--max-attempts",
        a.max_attempts.map(u64::from),
    );
    l.set_int("relay.lease_ms", "--lease-ms", a.lease_ms);
    l.set_int("relay.poll_max_ms", "--poll-max-ms", a.poll_max_ms);
    l.set_int(
        "relay.backoff_base_ms",
        "--backoff-base-ms",
        a.backoff_base_ms,
    );
    if a.keep_processed {
        l.set("relay.retention", "--keep-processed", "keep");
    }
    l.set_int(
        "shutdown_timeout_secs",
        "--shutdown-timeout-secs",
        a.shutdown_timeout_secs,
    );
    if let Some(addr) = &a.http_addr {
        l.set("http.addr", "--http-addr", addr.as_str());
    }
    l
}
