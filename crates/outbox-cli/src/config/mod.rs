//! Layered configuration: defaults, then a TOML file (`--config PATH` or
//! `OUTBOX_CONFIG`), then environment variables, then flags; the later
//! layer wins key by key. Every value remembers where it came from, so an
//! error can say which file line, variable or flag to fix.

mod env;
mod file;
mod flags;
pub mod keys;
mod logging;
mod model;
mod publisher;
mod show;
mod source_entries;
mod sources;
mod validate;

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::{anyhow, Result};

pub use flags::Flags;
pub use logging::log_filter;
pub use model::{Config, LogFormat, TracingConfig};
#[allow(unused_imports)] // the relay of many sources reads it
pub use publisher::PublisherConfig;
pub use show::{redacted_json, render};
#[allow(unused_imports)] // the relay of many sources reads them
pub use source_entries::{Refusal, SchemaSelector, SourceEntry};
#[allow(unused_imports)] // the relay of many sources reads them
pub use sources::{Readiness, SourceConfig, SourcesSettings};

/// Where a setting's value came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// Nothing set it.
    Default,
    /// A line of the config file.
    File {
        /// The file.
        path: PathBuf,
        /// The 1-based line.
        line: usize,
    },
    /// An environment variable.
    Env(String),
    /// A command-line flag.
    Flag(&'static str),
}

impl Origin {
    /// `set by --batch-size`, `set at /etc/outbox.toml:3`, `default`.
    pub fn describe(&self) -> String {
        match self {
            Origin::Default => "default".to_owned(),
            Origin::File { path, line } => format!("set at {}:{line}", path.display()),
            Origin::Env(var) => format!("set by {var}"),
            Origin::Flag(flag) => format!("set by {flag}"),
        }
    }
}

/// The effective configuration and where each value came from.
#[derive(Debug, Clone)]
pub struct Loaded {
    /// The settings.
    pub config: Config,
    /// The origin of every key that was set (absent: default).
    pub origins: BTreeMap<String, Origin>,
    /// The config file, if one was read.
    pub file: Option<PathBuf>,
}

impl Loaded {
    /// Where the dotted key `path` got its value.
    pub fn origin(&self, path: &str) -> Origin {
        self.origins.get(path).cloned().unwrap_or(Origin::Default)
    }
}

/// What a command line asks of the configuration, in plain values: the
/// configuration knows nothing of how the command line is parsed.
#[derive(Debug, Clone)]
pub struct Request {
    /// The config file to read (`--config`, `OUTBOX_CONFIG`, or the path
    /// given to `config check`), if any.
    pub file: Option<PathBuf>,
    /// The settings given as flags.
    pub flags: Flags,
    /// `log.level` when nothing sets it.
    pub default_log_level: &'static str,
}

/// Loads the configuration `request` asks for from the file, the process
/// environment and the flags, and validates it.
pub fn load(request: Request) -> Result<Loaded> {
    let file = request.file.as_deref().map(file::read).transpose()?;
    resolve(file, env::read()?, request.flags, request.default_log_level)
}

/// Layers `file`, `env` and `flags` over the defaults and validates the
/// result.
fn resolve(
    file: Option<file::FileLayer>,
    env: env::EnvLayer,
    flags: Flags,
    default_log_level: &str,
) -> Result<Loaded> {
    let mut merged = file.as_ref().map(|f| f.table.clone()).unwrap_or_default();
    merge(&mut merged, env.table);
    merge(&mut merged, flags.table);
    let mut config: Config = merged.try_into().map_err(|e: toml::de::Error| {
        anyhow!(
            "invalid configuration: {}",
            crate::text::one_line(&e.to_string())
        )
    })?;

    let mut origins = BTreeMap::new();
    if let Some(f) = &file {
        for (key, line) in &f.lines {
            let origin = Origin::File {
                path: f.path.clone(),
                line: *line,
            };
            origins.insert(key.clone(), origin);
        }
    }
    origins.extend(env.vars.into_iter().map(|(k, v)| (k, Origin::Env(v))));
    origins.extend(flags.flags.into_iter().map(|(k, f)| (k, Origin::Flag(f))));

    if config.log.level.is_none() {
        config.log.level = Some(default_log_level.to_owned());
    }
    let loaded = Loaded {
        config,
        origins,
        file: file.map(|f| f.path),
    };
    validate::validate(&loaded)?;
    Ok(loaded)
}

/// Sets the dotted key `path` in `table`, creating tables on the way.
pub(crate) fn set_path(table: &mut toml::Table, path: &str, value: toml::Value) {
    match path.split_once('.') {
        None => {
            table.insert(path.to_owned(), value);
        }
        Some((head, rest)) => {
            let entry = table
                .entry(head.to_owned())
                .or_insert_with(|| toml::Value::Table(toml::Table::new()));
            if !entry.is_table() {
                *entry = toml::Value::Table(toml::Table::new());
            }
            if let toml::Value::Table(inner) = entry {
                set_path(inner, rest, value);
            }
        }
    }
}

/// Copies `over` into `base`, key by key, recursing into tables.
fn merge(base: &mut toml::Table, over: toml::Table) {
    for (key, value) in over {
        match (base.get_mut(&key), value) {
            (Some(toml::Value::Table(b)), toml::Value::Table(o)) => merge(b, o),
            (_, value) => {
                base.insert(key, value);
            }
        }
    }
}

#[cfg(test)]
mod tests;
