//! The library's error type.

use std::time::Duration;

/// Everything that can go wrong in the library.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An event or a setting was rejected before anything was written.
    #[error("invalid {field}: {reason}")]
    Invalid {
        /// The field or setting that was rejected, e.g. `aggregate_id`.
        field: String,
        /// What is wrong and how to fix it.
        reason: String,
    },
    /// The payload or headers could not be serialised to JSON.
    #[error("could not serialise {field} to JSON")]
    Serialize {
        /// `payload` or `headers`.
        field: &'static str,
        /// The serde error.
        #[source]
        source: serde_json::Error,
    },
    /// The outbox tables (or functions) do not exist in the configured
    /// schema.
    #[error(
        "the outbox schema {schema:?} is not migrated ({table} is missing): run `outbox migrate`"
    )]
    NotMigrated {
        /// The configured schema.
        schema: String,
        /// What was looked for: `table NAME` or `function NAME(ARGS)`.
        table: String,
    },
    /// A database call failed.
    #[error("database error during {during}")]
    Database {
        /// What the library was doing, e.g. `claiming a batch`.
        during: &'static str,
        /// The driver's error.
        #[source]
        source: sqlx::Error,
    },
    /// The relay did not stop within its shutdown deadline.
    #[error("relay did not stop within {0:?}")]
    ShutdownTimeout(Duration),
}

impl Error {
    /// Builds an [`Error::Invalid`].
    pub fn invalid(field: impl Into<String>, reason: impl Into<String>) -> Self {
        Error::Invalid {
            field: field.into(),
            reason: reason.into(),
        }
    }

    /// Whether the outbox's tables or schema are missing (SQLSTATE 42P01
    /// undefined table, 3F000 invalid schema name): the fix is
    /// `outbox migrate`, not waiting.
    pub fn is_missing_table(&self) -> bool {
        match self {
            Error::NotMigrated { .. } => true,
            Error::Database {
                source: sqlx::Error::Database(db),
                ..
            } => matches!(db.code().as_deref(), Some("42P01" | "3F000")),
            _ => false,
        }
    }

    /// The error with its causes, on one line (`a: b: c`), for logs and
    /// outage reports: the display alone names only what was being done.
    pub fn with_causes(&self) -> String {
        let mut out = self.to_string();
        let mut source = std::error::Error::source(self);
        while let Some(cause) = source {
            let text = cause.to_string();
            if !out.ends_with(&text) {
                out.push_str(": ");
                out.push_str(&text);
            }
            source = cause.source();
        }
        out.replace(['\n', '\r'], " ")
    }

    /// The SQLSTATE PostgreSQL answered with, if it answered.
    pub(crate) fn sqlstate(&self) -> Option<String> {
        match self {
            Error::Database {
                source: sqlx::Error::Database(db),
                ..
            } => db.code().map(|c| c.into_owned()),
            _ => None,
        }
    }

    pub(crate) fn db(during: &'static str) -> impl FnOnce(sqlx::Error) -> Self {
        move |source| Error::Database { during, source }
    }

    /// True when retrying the same call later may succeed (a lost connection,
    /// a restarting server, a serialisation failure); false for bad input.
    pub fn is_retriable(&self) -> bool {
        match self {
            Error::Database { source, .. } => match source {
                sqlx::Error::Io(_)
                | sqlx::Error::PoolTimedOut
                | sqlx::Error::PoolClosed
                | sqlx::Error::WorkerCrashed
                | sqlx::Error::Protocol(_) => true,
                sqlx::Error::Database(db) => {
                    // Class 08 connection exceptions, 40 transaction rollback,
                    // 53 insufficient resources, 57 operator intervention.
                    let code = db.code().unwrap_or_default();
                    ["08", "40", "53", "57"].iter().any(|c| code.starts_with(c))
                }
                _ => false,
            },
            Error::ShutdownTimeout(_) => true,
            _ => false,
        }
    }
}

/// Checks that a setting lies in `min..=max`; the error names the field,
/// the value and the range.
pub(crate) fn range(field: &str, value: u64, min: u64, max: u64) -> Result<()> {
    if value < min || value > max {
        return Err(Error::invalid(
            field,
            format!("{value} is out of range: use {min} to {max}"),
        ));
    }
    Ok(())
}

/// The library's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;
