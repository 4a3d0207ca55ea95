//! Settings from command-line flags: the strongest layer. The command line
//! fills a [`Flags`] with the keys its flags set; nothing here knows how it
//! parses them.

use std::collections::BTreeMap;

use super::set_path;

/// The settings given as flags, each with the flag that gave it.
#[derive(Debug, Clone, Default)]
pub struct Flags {
    /// Values by dotted key.
    pub(super) table: toml::Table,
    /// The flag each key came from.
    pub(super) flags: BTreeMap<String, &'static str>,
}

impl Flags {
    /// Sets the dotted key `path` to `value`, given by `flag`.
    pub fn set(&mut self, path: &str, flag: &'static str, value: impl Into<toml::Value>) {
        set_path(&mut self.table, path, value.into());
        self.flags.insert(path.to_owned(), flag);
    }

    /// Sets `path` to `value`, if the flag was given.
    pub fn set_str(&mut self, path: &str, flag: &'static str, value: Option<&str>) {
        if let Some(v) = value {
            self.set(path, flag, v);
        }
    }

    /// Sets `path` to the whole number `value`, if the flag was given.
    pub fn set_int(&mut self, path: &str, flag: &'static str, value: Option<u64>) {
        if let Some(v) = value {
            // Beyond i64 cannot be stored in TOML; saturate so range
            // validation reports it.
            self.set(path, flag, i64::try_from(v).unwrap_or(i64::MAX));
        }
    }
}
