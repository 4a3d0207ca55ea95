//! A PostgreSQL cluster with `wal_level = logical`, shared by the tests of
//! one binary, and a fresh database on it per test.

use std::sync::OnceLock;

use outbox_testkit::postgres::PgCluster;
use sqlx::postgres::{PgConnection, PgPool, PgPoolOptions};
use sqlx::{Connection, Executor};

/// One cluster with `wal_level = logical` for the tests of this binary.
static LOGICAL: OnceLock<PgCluster> = OnceLock::new();

pub async fn logical_cluster() -> &'static PgCluster {
    if let Some(c) = LOGICAL.get() {
        return c;
    }
    let started = tokio::task::spawn_blocking(|| outbox_testkit::postgres::logical_cluster(&[]))
        .await
        .unwrap();
    let _ = LOGICAL.set(started);
    LOGICAL.get().unwrap()
}

/// A fresh database on `cluster`, and a pool on it.
pub async fn database(cluster: &PgCluster) -> (String, PgPool) {
    let name = format!("w_{:016x}", rand::random::<u64>());
    let mut admin = PgConnection::connect(&cluster.url()).await.unwrap();
    admin
        .execute(format!("CREATE DATABASE {name}").as_str())
        .await
        .unwrap();
    let url = cluster.url_for(&name);
    let pool = PgPoolOptions::new()
        .max_connections(8)
        .connect(&url)
        .await
        .unwrap();
    (url, pool)
}
