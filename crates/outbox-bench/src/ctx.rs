//! [`Ctx`]: what the program running a benchmark hands it.

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;

use outbox::Schema;
use sqlx::PgPool;

/// Serves the web console of a schema over a pool on loopback (any free
/// port, no password, read-write) on a task of its own; the address it
/// serves on. `bench console` measures the console the program serves.
pub type ServeConsole =
    fn(PgPool, Schema) -> Pin<Box<dyn Future<Output = anyhow::Result<SocketAddr>> + Send>>;

/// What every scenario is handed by the program that runs it (`outbox
/// bench`).
#[derive(Clone)]
pub struct Ctx {
    /// The configured database URL, already checked; `None` runs on a
    /// throwaway cluster.
    pub database_url: Option<String>,
    /// The program's console, for `bench console`.
    pub serve_console: ServeConsole,
}

impl Ctx {
    /// The configured database URL, if any.
    pub fn database_url(&self) -> &Option<String> {
        &self.database_url
    }
}
