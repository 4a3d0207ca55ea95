//! Throwaway PostgreSQL for tests.
//!
//! [`PgCluster`] is the embedded throwaway cluster of `outbox-embedded-pg`
//! (`initdb` into a temporary directory, a server on a free port of
//! `127.0.0.1`, removed on drop and after the test process dies); its
//! documentation says where the binaries come from and how running as root
//! works.
//!
//! [`test_db`] gives each test its own database: on the server named by
//! `DATABASE_URL` when that is set, otherwise on one throwaway cluster that
//! is shared by every test of the process (never dropped: its watchdog
//! removes it after the process is gone).

mod test_db;
mod url;

pub use outbox_embedded_pg::{find_bin_dir, free_port, PgCluster, PgError, PgOptions, BIN_DIR_ENV};
pub use test_db::{migrated_test_db, test_db, TestDb, DATABASE_URL_ENV};

/// Options for a throwaway cluster the WAL mode can run on: `wal_level =
/// logical`, commits flushed at once (a message is readable when its commit
/// returns, and a restart loses none), room for a slot and a WAL sender
/// per test, and `extra` settings.
pub fn logical_options(extra: &[(&str, &str)]) -> PgOptions {
    let mut conf: Vec<(String, String)> = [
        ("wal_level", "logical"),
        ("synchronous_commit", "on"),
        ("max_replication_slots", "64"),
        ("max_wal_senders", "64"),
    ]
    .iter()
    .chain(extra)
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    // A later setting of the same name wins, as in postgresql.conf.
    conf.reverse();
    let mut seen = std::collections::HashSet::new();
    conf.retain(|(k, _)| seen.insert(k.clone()));
    conf.reverse();
    PgOptions {
        extra_conf: conf,
        ..PgOptions::default()
    }
}

/// Starts a throwaway cluster with [`logical_options`]; blocks (call it
/// off the async runtime) and panics if the server cannot start.
pub fn logical_cluster(extra: &[(&str, &str)]) -> PgCluster {
    PgCluster::start_with(logical_options(extra)).expect("a cluster with wal_level = logical")
}
