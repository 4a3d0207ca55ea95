//! One module per subcommand, and [`targets`]: what `--source` selects.

pub mod bench;
pub mod cleanup;
pub mod config;
pub mod dead_letters;
pub mod demo;
pub mod healthcheck;
pub mod migrate;
pub mod relay;
pub mod status;
pub mod targets;

use outbox::Schema;

/// What every command is handed: the configuration loaded (and validated)
/// from the file, the environment and the flags, and its schema.
pub struct Ctx {
    /// The layered configuration, with the origin of every key.
    pub loaded: crate::config::Loaded,
    /// `schema`, checked.
    pub schema: Schema,
}

impl Ctx {
    /// The configuration's database URL, if any.
    pub fn database_url(&self) -> &Option<String> {
        &self.loaded.config.database_url
    }
}
