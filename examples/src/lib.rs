//! What the example programs share: the PostgreSQL they run against.
//!
//! Each example runs on the server named by `DATABASE_URL` when that is set,
//! and otherwise on a throwaway PostgreSQL cluster of its own (started from
//! the server binaries, as `outbox demo` does, and removed when the program
//! exits). See the programs in `src/bin/`.

use anyhow::{Context, Result};
use outbox_embedded_pg::PgCluster;
use sqlx::postgres::PgPoolOptions;
use sqlx::PgPool;

/// A connection pool, and the throwaway cluster behind it if one was
/// started. Keep it alive as long as the pool is used: dropping it stops
/// the cluster.
pub struct Database {
    /// The pool.
    pub pool: PgPool,
    /// Where the pool points, for messages (no credentials).
    pub description: String,
    _cluster: Option<PgCluster>,
}

impl Database {
    /// Connects to `DATABASE_URL`, or starts a throwaway cluster, with a
    /// pool of at most `max_connections` (an embedded relay needs 3 of its
    /// own, and a 4th while it looks behind its claim cursor, every 30 s).
    pub async fn open(max_connections: u32) -> Result<Database> {
        let (cluster, url, description) = match std::env::var("DATABASE_URL") {
            Ok(url) if !url.trim().is_empty() => {
                (None, url, "the server named by DATABASE_URL".to_owned())
            }
            _ => {
                let cluster = tokio::task::spawn_blocking(PgCluster::start)
                    .await?
                    .context(
                        "cannot start a throwaway PostgreSQL (install the server binaries, \
                         or set DATABASE_URL to use a running server)",
                    )?;
                let description = format!(
                    "a throwaway PostgreSQL on 127.0.0.1:{} (removed on exit)",
                    cluster.port()
                );
                let url = cluster.url();
                (Some(cluster), url, description)
            }
        };
        let pool = PgPoolOptions::new()
            .max_connections(max_connections)
            .connect(&url)
            .await
            .with_context(|| format!("connecting to {description}"))?;
        Ok(Database {
            pool,
            description,
            _cluster: cluster,
        })
    }

    /// [`Database::open`] for the example `program` (which it names on
    /// stderr, with where it runs), then installs the outbox schema
    /// (`outbox::migrate`, which also creates the inbox table
    /// `processed_events`) and runs `ddl`, the example's own
    /// `CREATE TABLE IF NOT EXISTS`.
    pub async fn prepared(program: &str, max_connections: u32, ddl: &str) -> Result<Database> {
        let db = Database::open(max_connections).await?;
        eprintln!("{program}: using {}", db.description);
        let mut conn = db.pool.acquire().await?;
        outbox::migrate(&mut conn, &Default::default(), &Default::default()).await?;
        sqlx::query(ddl).execute(&mut *conn).await?;
        drop(conn);
        Ok(db)
    }
}
