//! Dormancy, the worker's side: when an idle worker goes dormant
//! ([`dormant_due`], asked by the idle phase) and what going dormant does
//! ([`Worker::go_dormant`]). The worker then ends
//! ([`super::Exit::Dormant`]); its source watches for work on its behalf
//! and starts a new one (`relay/sources/dormant.rs`).

use std::time::Duration;

use super::Worker;

/// Whether an idle worker goes dormant: it may (`dormant_after`), has been
/// idle that long, has nothing awaiting acknowledgement, and producers are
/// told to wake it (without the announcement only the poll would).
pub(super) fn dormant_due(
    dormant_after: Option<Duration>,
    idle_for: Duration,
    unacked: bool,
    announced: bool,
) -> bool {
    dormant_after.is_some_and(|after| idle_for >= after) && !unacked && announced
}

impl Worker {
    /// Goes dormant: acknowledges what was delivered, and keeps its
    /// partitions' leases, unrenewed, and producers told to wake this
    /// relay: a commit within the lease is claimed at once, without a lease
    /// round first; past it, the partitions go to whoever takes them
    /// (another instance, or this one when it wakes), as a stopped
    /// instance's would. The publisher stays open. Returns when the
    /// earliest backoff of `partitions` ends, if any (on error: soon, so
    /// the source looks again).
    pub(super) async fn go_dormant(&mut self, partitions: &[i32]) -> Option<Duration> {
        self.acknowledge_or_give_up().await;
        let retry_in = match self.deps.store.event_next_retry(partitions).await {
            Ok(retry_in) => retry_in,
            Err(e) => {
                tracing::debug!(error = %e.with_causes(), "could not read the next retry time going dormant; looking again soon");
                Some(Duration::from_millis(self.deps.config.poll_max_ms))
            }
        };
        self.deps.store.connection_release();
        retry_in
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_worker_goes_dormant_only_idle_long_enough_acknowledged_and_announced() {
        let after = Some(Duration::from_secs(1));
        let long = Duration::from_secs(2);
        assert!(dormant_due(after, long, false, true));
        assert!(!dormant_due(None, long, false, true), "not allowed to");
        assert!(!dormant_due(after, Duration::from_millis(999), false, true));
        assert!(
            !dormant_due(after, long, true, true),
            "a batch awaits its ack"
        );
        assert!(
            !dormant_due(after, long, false, false),
            "nothing would wake it"
        );
    }
}
