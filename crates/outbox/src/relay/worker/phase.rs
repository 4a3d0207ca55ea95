//! The worker's phases and its one decision point.

use std::time::Duration;

use crate::error::Error;
use crate::relay::ownership::Claimable;
use crate::relay::store::Claimed;

/// Where the worker is. Each phase runs one step (a claim, a publish, a
/// wait) and names the next; what lives longer than a step (the batch
/// awaiting acknowledgement, the batch claimed ahead, the backoffs) is kept
/// in the worker.
#[derive(Debug)]
pub(crate) enum Phase {
    /// Choose the next step: see [`decide`].
    Decide,
    /// Acknowledge what was delivered, then hand over the partitions another
    /// instance is due to take.
    Release,
    /// No partitions held: wait for the lease round to get some.
    Park,
    /// Claim a batch, acknowledging the previous one in the same statement.
    Claim(Claimable),
    /// Nothing deliverable: wait for a wake-up, the next poll or the end of
    /// the earliest backoff.
    Idle(Claimable),
    /// Publish a claimed batch while the database acknowledges the previous
    /// one and claims the next.
    Publish(Claimable, Claimed),
    /// The broker is down: acknowledge what got through, wait, burn no
    /// attempts.
    BrokerDown(String),
    /// The database is down (or the tables are gone): wait and retry.
    DatabaseDown(Error),
    /// Acknowledge, release every partition, close the publisher.
    Stop,
    /// Idle past `dormant_after` with the announcement standing: end,
    /// leaving the leases to lapse unless the worker starts again within
    /// them, the announcement for producers' trigger, and the publisher
    /// open (a relay of many sources watches for the next wake-up and
    /// starts the worker again).
    Dormant(Claimable),
}

/// What the worker knows when it decides.
#[derive(Debug)]
pub(crate) struct Situation {
    /// Shutdown was asked for.
    pub stopping: bool,
    /// Partitions are due to be handed over.
    pub release_due: bool,
    /// What may be claimed now.
    pub claimable: Claimable,
    /// A batch claimed while the previous one was published, usable only
    /// because every event of that one was delivered.
    pub prefetched: Option<Claimed>,
}

/// The worker's decision: stop, hand over, park, publish what was claimed
/// ahead, or claim.
pub(crate) fn decide(s: Situation) -> Phase {
    if s.stopping {
        Phase::Stop
    } else if s.release_due {
        Phase::Release
    } else if s.claimable.partitions.is_empty() {
        Phase::Park
    } else {
        match s.prefetched.filter(|b| !b.events.is_empty()) {
            Some(batch) => Phase::Publish(s.claimable, batch),
            None => Phase::Claim(s.claimable),
        }
    }
}

/// The next idle wait: the poll backoff's, shortened to just past the end
/// of the earliest backoff of an owned partition.
pub(crate) fn idle_wait(poll: Duration, next_retry: Option<Duration>) -> Duration {
    match next_retry {
        Some(retry) => poll.min(retry + Duration::from_millis(1)),
        None => poll,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::test_event;

    fn claimable(partitions: &[i32]) -> Claimable {
        Claimable {
            partitions: partitions.to_vec(),
            epochs: vec![1; 4],
        }
    }

    fn batch(n: usize) -> Claimed {
        let mut c = Claimed::default();
        for _ in 0..n {
            c.events.push(test_event(0, "1"));
        }
        c
    }

    fn situation() -> Situation {
        Situation {
            stopping: false,
            release_due: false,
            claimable: claimable(&[0, 1]),
            prefetched: None,
        }
    }

    #[test]
    fn stopping_wins_over_everything() {
        let s = Situation {
            stopping: true,
            release_due: true,
            prefetched: Some(batch(3)),
            ..situation()
        };
        assert!(matches!(decide(s), Phase::Stop));
    }

    #[test]
    fn a_due_hand_over_comes_before_any_claim() {
        let s = Situation {
            release_due: true,
            prefetched: Some(batch(3)),
            ..situation()
        };
        assert!(matches!(decide(s), Phase::Release));
    }

    #[test]
    fn without_partitions_the_worker_parks() {
        let s = Situation {
            claimable: claimable(&[]),
            prefetched: Some(batch(3)),
            ..situation()
        };
        assert!(matches!(decide(s), Phase::Park));
    }

    #[test]
    fn a_batch_claimed_ahead_is_published_and_an_empty_one_claims_afresh() {
        let s = Situation {
            prefetched: Some(batch(3)),
            ..situation()
        };
        assert!(matches!(decide(s), Phase::Publish(_, b) if b.events.len() == 3));
        let s = Situation {
            prefetched: Some(batch(0)),
            ..situation()
        };
        assert!(matches!(decide(s), Phase::Claim(_)));
        assert!(matches!(decide(situation()), Phase::Claim(c) if c.partitions == [0, 1]));
    }

    #[test]
    fn idle_waits_end_just_after_the_earliest_backoff() {
        let poll = Duration::from_millis(500);
        assert_eq!(idle_wait(poll, None), poll);
        assert_eq!(
            idle_wait(poll, Some(Duration::from_millis(20))),
            Duration::from_millis(21)
        );
        assert_eq!(idle_wait(poll, Some(Duration::from_secs(5))), poll);
    }
}
