//! The pace of a worker that keeps up with its producers.
//!
//! A claim that returns fewer than `batch_size` events means the worker has
//! caught up. Claiming again at once would return the one or two events
//! committed meanwhile: a busy relay then runs hundreds of claims a second,
//! and on a small machine their CPU is what the producers lose (measured
//! on 2 cores at about 2,500 events/s: the relay and its session took
//! 29–38 % of a core with a 2-ms pace, 23–24 % with 10 ms, 10–11 % with
//! 20 ms; docs/performance.md). So the next claim waits until the pace has
//! passed since the last one started. The
//! pace grows with the rate events arrive at, because the latency a user
//! accepts does too: [`PACE_MIN`] up to [`PACE_FREE_RATE`] (shorter than
//! the gap between two events there, so a producer that wakes the relay
//! after each commit never waits for it), then [`PACE_PER_RATE`] more per
//! event a second, up to [`PACE_MAX`] from about 2,000 events/s (the
//! 5,000/s delivery p99 target is 50 ms). An event waits at most one pace
//! more; a full batch (a backlog) is never paced, and neither is the first
//! claim after an idle spell.

use std::time::{Duration, Instant};

/// The pace at low rates.
pub(crate) const PACE_MIN: Duration = Duration::from_millis(1);
/// The longest pace.
pub(crate) const PACE_MAX: Duration = Duration::from_millis(10);
/// Up to this arrival rate (events a second) the pace is [`PACE_MIN`].
pub(crate) const PACE_FREE_RATE: f64 = 500.0;
/// What each event a second above [`PACE_FREE_RATE`] adds to the pace.
pub(crate) const PACE_PER_RATE: Duration = Duration::from_micros(6);
/// The arrival rate is the events claimed over at least this long, so the
/// few events of one claim, or an empty one, do not swing the pace.
const RATE_WINDOW: Duration = Duration::from_millis(50);

/// When the last caught-up claim started, and the rate events have been
/// arriving at since the worker caught up.
#[derive(Debug, Default)]
pub(crate) struct Pace {
    /// Start of the last claim that found the worker caught up; `None`
    /// after a full batch (nothing is paced then).
    last: Option<Instant>,
    /// Start of the claim that opened the current rate window, and the
    /// events claimed since (by the claims after it).
    window: Option<(Instant, usize)>,
    /// Events a second over the last full window.
    rate: f64,
}

impl Pace {
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
        }
    }

    /// The pace at the current rate estimate.
    pub fn pace(&self) -> Duration {
        PACE_PER_RATE
            .mul_f64((self.rate - PACE_FREE_RATE).max(0.0))
            .clamp(PACE_MIN, PACE_MAX)
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

    /// A pace after claims `every` apart returning `n` events each.
    fn steady(every: Duration, n: usize) -> (Pace, Instant) {
        let mut pace = Pace::default();
        let mut at = Instant::now();
        for _ in 0..50 {
            pace.observe(at, n, BATCH);
            at += every;
        }
        (pace, at - every)
    }

    #[test]
    fn nothing_is_paced_before_the_first_claim_or_after_a_full_batch() {
        let mut pace = Pace::default();
        let now = Instant::now();
        assert_eq!(pace.wait(now), Duration::ZERO);
        pace.observe(now, 3, BATCH);
        assert_eq!(pace.wait(now), PACE_MIN);
        pace.observe(now, BATCH, BATCH);
        assert_eq!(pace.wait(now), Duration::ZERO);
    }

    #[test]
    fn the_wait_is_what_is_left_of_the_pace_since_the_last_claim_started() {
        let mut pace = Pace::default();
        let start = Instant::now();
        pace.observe(start, 1, BATCH);
        assert_eq!(pace.wait(start + PACE_MIN / 2), PACE_MIN - PACE_MIN / 2);
        assert_eq!(pace.wait(start + PACE_MIN), Duration::ZERO);
        assert_eq!(pace.wait(start + Duration::from_secs(60)), Duration::ZERO);
    }

    #[test]
    fn low_rates_get_the_shortest_pace() {
        // 500 events/s: one event per 2-ms claim.
        let (pace, _) = steady(Duration::from_millis(2), 1);
        assert_eq!(pace.pace(), PACE_MIN);
        assert!(PACE_MIN.as_secs_f64() < 1.0 / PACE_FREE_RATE);
        // An idle worker's long polls find nothing: the rate decays.
        let (pace, _) = steady(Duration::from_millis(500), 0);
        assert_eq!(pace.pace(), PACE_MIN);
    }

    #[test]
    fn the_pace_grows_with_the_rate_up_to_its_longest() {
        // 1,500 events/s: 9 events per 6-ms claim.
        let (pace, _) = steady(Duration::from_millis(6), 9);
        let expected = PACE_PER_RATE * 1_000;
        let error = pace.pace().abs_diff(expected);
        assert!(error < Duration::from_micros(50), "{:?}", pace.pace());
        // 5,000 events/s: 50 events per 10-ms claim.
        let (pace, _) = steady(Duration::from_millis(10), 50);
        assert_eq!(pace.pace(), PACE_MAX);
    }

    #[test]
    fn one_odd_claim_does_not_swing_the_pace() {
        let (mut pace, last) = steady(Duration::from_millis(2), 1);
        pace.observe(last + Duration::from_millis(2), 8, BATCH);
        assert!(pace.pace() < PACE_MAX, "{:?}", pace.pace());
    }

    #[test]
    fn only_a_short_batch_counts_as_caught_up() {
        assert!(Pace::caught_up(0, 500));
        assert!(Pace::caught_up(499, 500));
        assert!(!Pace::caught_up(500, 500));
        assert!(!Pace::caught_up(1, 1));
    }
}
