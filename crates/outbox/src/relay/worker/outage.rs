//! The outage phases: a broker or the database unavailable. Each waits a
//! doubling delay and counts no attempt.

use super::phase::Phase;
use super::Worker;
use crate::error::Error;
use crate::relay::observe::OutageKind;

impl Worker {
    pub(super) async fn broker_down(&mut self, error: String) -> Phase {
        let delay = self.outage.next_delay();
        tracing::warn!(publisher = self.deps.publisher.name(), %error, retry_in_ms = delay.as_millis() as u64, "publisher unavailable; no attempts counted");
        if let Some(o) = &self.deps.observer {
            o.on_outage(OutageKind::Broker, &error);
        }
        // Acknowledge what got through before waiting.
        self.acknowledge_unacked().await;
        self.deps.store.connection_release();
        self.sleep(delay).await;
        Phase::Decide
    }

    pub(super) async fn database_down(&mut self, error: Error) -> Phase {
        let delay = self.outage.next_delay();
        let message = error.with_causes();
        if error.is_missing_table() {
            // Named once per change by the lease round, which runs whether
            // or not this instance holds partitions.
            tracing::debug!(error = %message, "outbox tables missing; retrying");
        } else {
            tracing::warn!(error = %message, retry_in_ms = delay.as_millis() as u64, "database unavailable");
        }
        self.deps.stats.add_outage();
        if let Some(o) = &self.deps.observer {
            o.on_outage(OutageKind::Database, &message);
        }
        self.deps.store.connection_release();
        self.sleep(delay).await;
        Phase::Decide
    }
}
