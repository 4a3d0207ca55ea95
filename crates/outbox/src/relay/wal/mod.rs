//! The relay of a WAL-mode schema: it streams the schema's logical
//! messages from its replication slot and publishes them through the
//! delivery core the table mode uses ([`crate::relay::deliver`]). Started
//! the same way (`Assembly::start_reader`, in `relay/assembly.rs`) by a
//! relay of one source and by each source of a relay of many.
//!
//! | concept | file |
//! |---------|------|
//! | where the replication connection goes | here ([`ReplicationTarget`]) |
//! | one session on the slot; the server's refusals; one reader per slot | [`session`] |
//! | the stream: messages into batches at transaction ends, confirming the slot | [`reader`], what a session holds in [`hand`] |
//! | one batch: split, published, set aside, reported, then the slot confirmed | [`flush`] |
//! | reading on while a batch is in flight: batches read whole join it | [`ahead`] |
//! | each message into an event, numbered, or refused | [`incoming`] |
//! | each message checked as the table would check its row; a second one with an id already read refused | [`check`] |
//! | one batch published in lanes; outages waited out | [`settle`] |
//! | the slow path: events set aside in the table | [`set_aside`] |
//! | the confirmed position, saved beside the slot | [`position`] |
//! | the switch back to the table mode, ended by the reader | [`switch`] |

mod ahead;
pub(crate) mod check;
mod flush;
mod hand;
pub(crate) mod incoming;
pub(crate) mod position;
pub(crate) mod reader;
pub(crate) mod session;
pub(crate) mod set_aside;
pub(crate) mod settle;
pub(crate) mod switch;

pub use reader::SlotState;

use crate::error::{Error, Result};

/// Where the relay opens its replication connection: the server itself
/// (a replication connection cannot pass through PgBouncer).
#[derive(Clone, PartialEq, Eq)]
pub struct ReplicationTarget {
    /// Host name or address, or a Unix socket directory (starting with `/`).
    pub host: String,
    /// Port.
    pub port: u16,
    /// Role; it needs the `REPLICATION` attribute.
    pub user: String,
    /// Password (empty for trust or peer authentication).
    pub password: String,
    /// Database the slot belongs to.
    pub database: String,
}

impl std::fmt::Debug for ReplicationTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReplicationTarget")
            .field("host", &self.host)
            .field("port", &self.port)
            .field("user", &self.user)
            .field("database", &self.database)
            .finish_non_exhaustive()
    }
}

impl ReplicationTarget {
    /// The target of a `postgres://user:password@host:port/database` URL
    /// (the relay's database URL). `?host=/dir` names a socket directory.
    pub fn from_url(url: &str) -> Result<Self> {
        let invalid = |reason: String| Error::invalid("database_url", reason);
        let parsed = url::Url::parse(url).map_err(|e| {
            invalid(format!(
                "{} is not a URL ({e}): use postgres://user:password@host:5432/database",
                crate::redact::redact_url(url)
            ))
        })?;
        if !matches!(parsed.scheme(), "postgres" | "postgresql") {
            return Err(invalid(format!(
                "the scheme is {:?}: use postgres://user:password@host:5432/database",
                parsed.scheme()
            )));
        }
        let decode = |s: &str| {
            percent_encoding::percent_decode_str(s)
                .decode_utf8_lossy()
                .into_owned()
        };
        let socket = parsed
            .query_pairs()
            .find(|(k, _)| k == "host")
            .map(|(_, v)| v.into_owned());
        let host = socket
            .or_else(|| parsed.host_str().map(str::to_owned))
            .unwrap_or_else(|| "localhost".to_owned());
        let user = match parsed.username() {
            "" => std::env::var("USER").unwrap_or_else(|_| "postgres".to_owned()),
            u => decode(u),
        };
        let database = match parsed.path().trim_start_matches('/') {
            "" => user.clone(),
            d => decode(d),
        };
        Ok(ReplicationTarget {
            host: host
                .trim_start_matches('[')
                .trim_end_matches(']')
                .to_owned(),
            port: parsed.port().unwrap_or(5432),
            password: parsed.password().map(decode).unwrap_or_default(),
            user,
            database,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_database_url_gives_the_replication_target_with_its_escapes_undone() {
        let t =
            ReplicationTarget::from_url("postgres://relay:p%40ss@db.internal:6543/shop").unwrap();
        assert_eq!(
            (
                t.host.as_str(),
                t.port,
                t.user.as_str(),
                t.password.as_str(),
                t.database.as_str()
            ),
            ("db.internal", 6543, "relay", "p@ss", "shop")
        );
        let t = ReplicationTarget::from_url("postgresql://u@localhost/db?host=/run/postgresql")
            .unwrap();
        assert_eq!((t.host.as_str(), t.port), ("/run/postgresql", 5432));
        assert!(!format!(
            "{:?}",
            ReplicationTarget::from_url("postgres://u:secret@h/d").unwrap()
        )
        .contains("secret"));
        let err = ReplicationTarget::from_url("mysql://h/d")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("database_url") && err.contains("postgres://"),
            "{err}"
        );
    }
}
