//! [`Ctx`]: what every command, and the console, is handed.

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
