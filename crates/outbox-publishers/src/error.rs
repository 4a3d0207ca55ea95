//! The crate's one error type: why a publisher could not be configured or
//! built. (Failures while publishing are not errors: they are outcomes,
//! see [`outbox::Outcome`] and [`outbox::Unavailable`].)

use std::fmt;

/// Why a publisher could not be configured or built, naming the broker, the
/// setting and the fix. Never contains a secret: values of secret settings
/// and URL passwords are redacted before they get here.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A setting that cannot work.
    #[error("invalid {broker} setting {field} = {value}: {fix}")]
    Invalid {
        /// The publisher, e.g. `kafka`.
        broker: &'static str,
        /// The setting (or `properties.NAME`).
        field: String,
        /// The offending value, redacted if it is a secret.
        value: String,
        /// What is wrong and how to fix it.
        fix: String,
    },
    /// The broker's client library refused to start with these settings.
    #[error("creating the {broker} client: {message}")]
    Client {
        /// The publisher, e.g. `kafka`.
        broker: &'static str,
        /// What the client library said.
        message: String,
    },
}

impl Error {
    /// An invalid setting of `broker`.
    pub fn invalid(
        broker: &'static str,
        field: impl Into<String>,
        value: impl fmt::Display,
        fix: impl Into<String>,
    ) -> Self {
        Error::Invalid {
            broker,
            field: field.into(),
            value: value.to_string(),
            fix: fix.into(),
        }
    }

    /// The setting an [`Error::Invalid`] names.
    pub fn field(&self) -> Option<&str> {
        match self {
            Error::Invalid { field, .. } => Some(field),
            Error::Client { .. } => None,
        }
    }
}
