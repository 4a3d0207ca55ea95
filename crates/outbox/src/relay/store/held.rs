//! The connection the claims run on while the relay has work.
//!
//! Taking a connection from the pool costs a round trip (the pool checks it
//! before handing it out) and moves the claim from one session to another,
//! each with its own plan cache. While claims keep returning events the
//! store keeps the last claim's connection here and runs its next call on
//! it. Three rules keep that from taking a connection anyone else needs:
//!
//! - every call of the store takes the held connection, if there is one,
//!   before it asks the pool for another, so the store never waits on the
//!   pool while it holds one idle;
//! - a connection is held only after a claim that returned events; a claim
//!   that returned none, and any error, give it back to the pool (so an
//!   idle relay holds none, and a connection a server restart broke is
//!   checked by the pool before it is used again);
//! - it is not held when the pool has no idle connection left and is at
//!   its size limit: someone may be waiting for one.
//!
//! And the worker gives it back ([`super::Store::connection_release`])
//! before every wait but its pace (idle, outage, parked) and once
//! publishing a batch has taken longer than the longest pace, so a relay
//! waiting on a broker or for work holds no connection idle.

use std::sync::{Arc, Mutex};

use sqlx::pool::PoolConnection;
use sqlx::{PgPool, Postgres};

/// A slot for at most one connection of `pool`, shared by the store's
/// clones. (Public only for its tests, `tests/relay_store_held.rs`, through
/// `outbox::test_seam`.)
#[derive(Debug, Clone)]
pub struct Held {
    pool: PgPool,
    slot: Arc<Mutex<Option<PoolConnection<Postgres>>>>,
}

impl Held {
    /// An empty slot for a connection of `pool`.
    pub fn new(pool: PgPool) -> Self {
        Held {
            pool,
            slot: Arc::new(Mutex::new(None)),
        }
    }

    /// The held connection if there is one, else one from the pool.
    pub async fn connection(&self) -> Result<PoolConnection<Postgres>, sqlx::Error> {
        match self.take() {
            Some(conn) => Ok(conn),
            None => self.pool.acquire().await,
        }
    }

    /// Keeps `conn` for the next call, unless the pool may need it.
    pub fn keep(&self, conn: PoolConnection<Postgres>) {
        let full = self.pool.size() >= self.pool.options().get_max_connections();
        if full && self.pool.num_idle() == 0 {
            return;
        }
        // One kept at a time: a connection kept before is given back.
        let before = self.slot.lock().expect("held slot").replace(conn);
        drop(before);
    }

    /// Gives the held connection back to the pool.
    pub fn release(&self) {
        drop(self.take());
    }

    fn take(&self) -> Option<PoolConnection<Postgres>> {
        self.slot.lock().expect("held slot").take()
    }
}
