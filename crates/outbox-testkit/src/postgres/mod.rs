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
