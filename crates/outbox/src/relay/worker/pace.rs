//! The pace of a worker that keeps up with its producers: how it learns
//! that events arrived, given the latency budget.
//!
//! A claim costs about the same whether it returns one event or fifty, in
//! the relay and in its database session. So what a caught-up worker
//! spends is set by how often it claims, and the question is only what
//! makes it claim:
//!
//! - **Sparse** arrivals (fewer than one event per budget): it sleeps on
//!   the wake-up path. Its idle announcement stands, each producer's commit
//!   sends a `NOTIFY`, and the worker claims when one arrives: one claim
//!   per event, none in between, and an event is claimed as soon as its
//!   commit is seen. Polling at the budget instead would mostly find
//!   nothing (measured at 50 events/s: ten empty claims per event).
//! - **Dense** arrivals (an event or more per budget): it claims once per
//!   budget ([`Pace::pace`]), every claim finds events, and producers send
//!   no `NOTIFY` (each takes PostgreSQL's global notify lock at commit). An
//!   event waits at most one budget for its claim.
//!
//! The arrival rate is estimated over at least [`RATE_WINDOW`]; the mode
//! changes with some hysteresis ([`DENSE_FROM`], [`SPARSE_BELOW`]) so a
//! stream near the boundary does not flip between the two (each flip
//! costs an announcement or its withdrawal). A full batch (a backlog) is
//! never paced, and neither is the first claim after an idle spell.

use std::time::{Duration, Instant};

/// The arrival rate is the events claimed over at least this long, so the
/// few events of one claim, or an empty one, do not swing the estimate.
const RATE_WINDOW: Duration = Duration::from_millis(50);
/// Sparse arrivals become dense from this many events per budget.
pub(crate) const DENSE_FROM: f64 = 1.0;
/// Dense arrivals become sparse below this many events per budget.
pub(crate) const SPARSE_BELOW: f64 = 0.5;

/// When the last caught-up claim started, the rate events have been
/// arriving at since the worker caught up, and which mode that rate puts
/// the worker in.
#[derive(Debug)]
pub(crate) struct Pace {
    /// The longest an event may wait for its claim while arrivals are
    /// dense: the pace between claims.
    budget: Duration,
    /// Start of the last claim that found the worker caught up; `None`
    /// after a full batch (nothing is paced then).
    last: Option<Instant>,
    /// Start of the claim that opened the current rate window, and the
    /// events claimed since (by the claims after it).
    window: Option<(Instant, usize)>,
    /// Events a second over the last full window.
    rate: f64,
    /// Whether arrivals are dense (see the module's documentation).
    dense: bool,
}

impl Pace {
    /// A pace for a latency budget of `budget`.
    pub fn new(budget: Duration) -> Self {
        Pace {
            budget,
            last: None,
            window: None,
            rate: 0.0,
            dense: false,
        }
    }

    /// Takes in a claim that started at `started` and returned `claimed`
    /// events of at most `batch_size`.
    pub fn observe(&mut self, started: Instant, claimed: usize, batch_size: usize) {
        if claimed >= batch_size {
            self.last = None;
            self.window = None;
            return;
        }
        self.last = Some(started);
        // A claim's events arrived before it started: they count in the
        // window that ends with it, and the next window opens empty.
        let Some((opened, events)) = self.window.as_mut() else {
            self.window = Some((started, 0));
            return;
        };
        *events += claimed;
        let span = started.saturating_duration_since(*opened);
        if span >= RATE_WINDOW {
            self.rate = *events as f64 / span.as_secs_f64();
            self.window = Some((started, 0));
            let per_budget = self.rate * self.budget.as_secs_f64();
            if per_budget >= DENSE_FROM {
                self.dense = true;
            } else if per_budget < SPARSE_BELOW {
                self.dense = false;
            }
        }
    }

    /// Whether arrivals are dense: the worker claims once per budget and
    /// does not sleep on the wake-up path.
    pub fn dense(&self) -> bool {
        self.dense
    }

    /// The pace between caught-up claims: the budget while arrivals are
    /// dense; while sparse, claims follow wake-ups and need no pace.
    pub fn pace(&self) -> Duration {
        if self.dense {
            self.budget
        } else {
            Duration::ZERO
        }
    }

    /// How long the next claim, at `now`, waits: what is left of the pace
    /// since the last caught-up claim started (zero after a full batch).
    pub fn wait(&self, now: Instant) -> Duration {
        self.last.map_or(Duration::ZERO, |last| {
            self.pace()
                .saturating_sub(now.saturating_duration_since(last))
        })
    }

    /// Whether a claim of `claimed` events of at most `batch_size` found
    /// the worker caught up: its batch is then published with no claim
    /// running ahead of it.
    pub fn caught_up(claimed: usize, batch_size: usize) -> bool {
        claimed < batch_size
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BATCH: usize = 500;
    const BUDGET: Duration = Duration::from_millis(4);

    /// Fifty claims `every` apart returning `n` events each, the first
    /// `every` after `clock`, which is left at the last.
    fn steady(pace: &mut Pace, clock: &mut Instant, every: Duration, n: usize) -> Instant {
        for _ in 0..50 {
            *clock += every;
            pace.observe(*clock, n, BATCH);
        }
        *clock
    }

    #[test]
    fn nothing_is_paced_before_the_first_claim_after_a_full_batch_or_while_sparse() {
        let mut clock = Instant::now();
        let mut pace = Pace::new(BUDGET);
        let now = Instant::now();
        assert_eq!(pace.wait(now), Duration::ZERO);
        pace.observe(now, 3, BATCH);
        assert!(!pace.dense(), "no rate known yet");
        assert_eq!(pace.wait(now), Duration::ZERO);
        let last = steady(&mut pace, &mut clock, Duration::from_millis(2), 2);
        assert!(pace.dense());
        assert!(pace.wait(last) > Duration::ZERO);
        pace.observe(last, BATCH, BATCH);
        assert_eq!(pace.wait(last), Duration::ZERO, "a backlog");
    }

    #[test]
    fn while_dense_the_wait_is_what_is_left_of_the_budget_since_the_last_claim_started() {
        let mut clock = Instant::now();
        let mut pace = Pace::new(BUDGET);
        let last = steady(&mut pace, &mut clock, Duration::from_millis(2), 2);
        assert_eq!(pace.pace(), BUDGET);
        assert_eq!(pace.wait(last + BUDGET / 2), BUDGET - BUDGET / 2);
        assert_eq!(pace.wait(last + BUDGET), Duration::ZERO);
        assert_eq!(pace.wait(last + Duration::from_secs(60)), Duration::ZERO);
    }

    #[test]
    fn an_event_or_more_per_budget_is_dense_and_fewer_than_half_is_sparse() {
        let mut clock = Instant::now();
        // 50 events/s: one event per 20-ms claim, 0.2 per budget.
        let mut pace = Pace::new(BUDGET);
        steady(&mut pace, &mut clock, Duration::from_millis(20), 1);
        assert!(!pace.dense());
        // 500 events/s: 2 per budget.
        steady(&mut pace, &mut clock, BUDGET, 2);
        assert!(pace.dense());
        // 5,000 events/s: 20 per budget.
        steady(&mut pace, &mut clock, BUDGET, 20);
        assert!(pace.dense());
        // Nothing arrives any more: empty claims, once per budget.
        steady(&mut pace, &mut clock, BUDGET, 0);
        assert!(!pace.dense());
    }

    #[test]
    fn a_rate_near_the_boundary_keeps_its_mode() {
        let mut clock = Instant::now();
        // 0.75 events per budget: between SPARSE_BELOW and DENSE_FROM.
        let mut from_sparse = Pace::new(BUDGET);
        steady(&mut from_sparse, &mut clock, BUDGET * 4, 3);
        assert!(!from_sparse.dense());
        let mut from_dense = Pace::new(BUDGET);
        steady(&mut from_dense, &mut clock, BUDGET, 2);
        steady(&mut from_dense, &mut clock, BUDGET * 4, 3);
        assert!(from_dense.dense());
    }

    #[test]
    fn one_odd_claim_does_not_swing_the_mode() {
        let mut clock = Instant::now();
        let mut pace = Pace::new(BUDGET);
        let last = steady(&mut pace, &mut clock, Duration::from_millis(20), 1);
        pace.observe(last + Duration::from_millis(2), 8, BATCH);
        assert!(!pace.dense());
    }

    #[test]
    fn only_a_short_batch_counts_as_caught_up() {
        assert!(Pace::caught_up(0, 500));
        assert!(Pace::caught_up(499, 500));
        assert!(!Pace::caught_up(500, 500));
        assert!(!Pace::caught_up(1, 1));
    }
}
