//! The settings a cluster is started with.

/// Settings for [`PgCluster::start_with`](crate::PgCluster::start_with).
///
/// Build it with struct-update syntax:
/// `PgOptions { fsync: true, ..PgOptions::default() }`.
#[derive(Debug, Clone)]
pub struct PgOptions {
    /// Keep PostgreSQL's durability settings (default `false`).
    ///
    /// When `false` the server runs with `fsync=off`,
    /// `synchronous_commit=off` and `full_page_writes=off`. Because of
    /// `synchronous_commit=off`, the last few hundred milliseconds of
    /// acknowledged commits can be lost when the server is killed
    /// ([`PgCluster::kill`](crate::PgCluster::kill)). Crash tests that must
    /// not lose acknowledged commits should add
    /// `("synchronous_commit", "on")` to [`extra_conf`](Self::extra_conf):
    /// that is enough against a killed server, since the operating system
    /// keeps what was written. `true` also guards against an
    /// operating-system crash, but makes crash recovery fsync the whole data
    /// directory (seconds).
    pub fsync: bool,
    /// `max_connections` (default 200).
    pub max_connections: u32,
    /// Further settings, passed as `-c name=value` after the built-in ones
    /// (so they override them).
    pub extra_conf: Vec<(String, String)>,
    /// Keep the cluster's directory when the
    /// [`PgCluster`](crate::PgCluster) is dropped, or when the process that
    /// started it disappears (default `false`). The server is stopped either
    /// way.
    pub keep_on_drop: bool,
}

impl Default for PgOptions {
    fn default() -> Self {
        PgOptions {
            fsync: false,
            max_connections: 200,
            extra_conf: Vec::new(),
            keep_on_drop: false,
        }
    }
}
