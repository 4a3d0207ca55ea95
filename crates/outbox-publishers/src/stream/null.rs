//! `--publisher null`: acknowledges everything at once and sends nothing.
//! For benchmarks (the relay's own cost) and dry runs.

use std::sync::atomic::{AtomicU64, Ordering};

use async_trait::async_trait;
use outbox::{Event, Outcome, Publisher, Unavailable};

/// Reports every event delivered without sending it anywhere.
#[derive(Debug, Default)]
pub struct NullPublisher {
    delivered: AtomicU64,
}

impl NullPublisher {
    /// Events "delivered" so far.
    pub fn delivered(&self) -> u64 {
        self.delivered.load(Ordering::Relaxed)
    }
}

#[async_trait]
impl Publisher for NullPublisher {
    fn name(&self) -> &str {
        "null"
    }

    async fn publish(&self, batch: &[Event]) -> Result<Vec<Outcome>, Unavailable> {
        self.delivered
            .fetch_add(batch.len() as u64, Ordering::Relaxed);
        Ok(vec![Outcome::Delivered; batch.len()])
    }
}
