//! A PostgreSQL cluster with `wal_level = logical`, shared by the tests of
//! one binary, and a fresh database on it per test.

use std::sync::OnceLock;

use outbox_testkit::postgres::{PgCluster, PgOptions};
use sqlx::postgres::{PgConnection, PgPool, PgPoolOptions};
use sqlx::{Connection, Executor};

/// One cluster with `wal_level = logical` for the tests of this binary.
static LOGICAL: OnceLock<PgCluster> = OnceLock::new();

pub async fn logical_cluster() -> &'static PgCluster {
    if let Some(c) = LOGICAL.get() {
        return c;
    }
    let started = tokio::task::spawn_blocking(|| {
        PgCluster::start_with(PgOptions {
            extra_conf: vec![
                ("wal_level".into(), "logical".into()),
                // Decoding reads only flushed WAL: with commits flushed at
                // once, a message is readable as soon as its commit returns.
                ("synchronous_commit".into(), "on".into()),
                // Each test makes a slot or two.
                ("max_replication_slots".into(), "64".into()),
                ("max_wal_senders".into(), "64".into()),
            ],
            ..PgOptions::default()
        })
    })
    .await
    .unwrap()
    .expect("a cluster with wal_level = logical");
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
