//! A fresh database per test, on `DATABASE_URL` or a shared throwaway
//! cluster.

use std::sync::OnceLock;

use outbox::redact::redact_url;
use sqlx::postgres::{PgConnection, PgPool, PgPoolOptions};
use sqlx::{Connection, Executor};

use super::url::with_database;
use super::PgCluster;

/// Environment variable naming an existing server for [`test_db`].
pub const DATABASE_URL_ENV: &str = "DATABASE_URL";

/// A database created for one test by [`test_db`].
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct TestDb {
    /// The database's connection URL.
    pub url: String,
    /// The database's name.
    pub name: String,
}

impl TestDb {
    /// A connection pool to the database (at most 10 connections).
    ///
    /// # Panics
    ///
    /// If the database cannot be reached.
    pub async fn pool(&self) -> PgPool {
        PgPoolOptions::new()
            .max_connections(10)
            .connect(&self.url)
            .await
            .unwrap_or_else(|e| {
                panic!(
                    "connecting a pool to test database {}: {e}",
                    redact_url(&self.url)
                )
            })
    }

    /// A single connection to the database.
    ///
    /// # Panics
    ///
    /// If the database cannot be reached.
    pub async fn connect(&self) -> PgConnection {
        PgConnection::connect(&self.url).await.unwrap_or_else(|e| {
            panic!("connecting to test database {}: {e}", redact_url(&self.url))
        })
    }
}

/// The cluster shared by [`test_db`], started on first use and kept for the
/// life of the process; its watchdog removes it after the process is gone.
static SHARED: OnceLock<Result<PgCluster, String>> = OnceLock::new();

fn shared_cluster() -> Result<&'static PgCluster, String> {
    SHARED
        .get_or_init(|| PgCluster::start().map_err(|e| e.to_string()))
        .as_ref()
        .map_err(Clone::clone)
}

/// Creates an empty database for one test and returns it.
///
/// If `DATABASE_URL` is set, the database is created on that server (which
/// must let that user `CREATE DATABASE`) and named `outbox_test_<hex>`; it is
/// not dropped afterwards. Otherwise it is created on a throwaway cluster
/// shared by all tests of the process, started on first use (about a
/// second), and named `t_<hex>`. Safe to call from any number of tests and
/// runtimes at once.
///
/// # Panics
///
/// With a message saying what failed, if the server cannot be started or
/// reached or the database cannot be created: this is for tests.
pub async fn test_db() -> TestDb {
    let suffix = format!("{:016x}", rand::random::<u64>());
    let (admin_url, name) = match std::env::var(DATABASE_URL_ENV) {
        Ok(url) if !url.trim().is_empty() => (url, format!("outbox_test_{suffix}")),
        _ => {
            let cluster = match SHARED.get() {
                Some(started) => started.as_ref().map_err(Clone::clone),
                // Starting blocks for a second: keep it off the async runtime.
                None => tokio::task::spawn_blocking(shared_cluster)
                    .await
                    .unwrap_or_else(|e| panic!("test_db: starting postgres panicked: {e}")),
            };
            let cluster = cluster.unwrap_or_else(|e| {
                panic!("test_db: could not start a throwaway postgresql cluster: {e}")
            });
            (cluster.url(), format!("t_{suffix}"))
        }
    };

    let shown = redact_url(&admin_url);
    let mut conn = PgConnection::connect(&admin_url).await.unwrap_or_else(|e| {
        panic!("test_db: could not connect to {shown} to create a test database: {e}")
    });
    conn.execute(format!("CREATE DATABASE \"{name}\"").as_str())
        .await
        .unwrap_or_else(|e| panic!("test_db: could not create database {name} on {shown}: {e}"));
    let _ = conn.close().await;

    TestDb {
        url: with_database(&admin_url, &name),
        name,
    }
}

/// [`test_db`] with the outbox migrated into its `public` schema, and a
/// pool on it.
pub async fn migrated_test_db() -> (TestDb, PgPool) {
    let db = test_db().await;
    let pool = db.pool().await;
    let mut conn = pool
        .acquire()
        .await
        .expect("a connection to the test database");
    outbox::migrate(&mut conn, &Default::default(), &Default::default())
        .await
        .unwrap_or_else(|e| panic!("migrating the test database: {e}"));
    drop(conn);
    (db, pool)
}
