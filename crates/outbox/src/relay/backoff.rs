//! Retry delays.

use std::time::Duration;

use rand::Rng;

/// The delay before the next attempt of an event that has failed
/// `attempts` times (1 after the first failure): `base * 2^(attempts-1)`,
/// capped at `max`, with "equal jitter" (half fixed, half random) so delays
/// grow but retries of many events spread out.
pub(crate) fn retry_delay(attempts: u32, base_ms: u64, max_ms: u64) -> Duration {
    let exp = attempts.saturating_sub(1).min(40);
    let full = base_ms.saturating_mul(1u64 << exp).min(max_ms);
    let half = full / 2;
    let jitter = if full > half {
        rand::rng().random_range(0..=full - half)
    } else {
        0
    };
    Duration::from_millis(half + jitter)
}

/// A wait that doubles from a minimum to a maximum and resets on success:
/// the worker's idle polling and its waits after an outage (broker or
/// database down).
#[derive(Debug)]
pub struct DoublingDelay {
    current_ms: u64,
    min_ms: u64,
    max_ms: u64,
}

impl DoublingDelay {
    /// Starts at `min_ms`, doubles up to `max_ms`.
    pub fn new(min_ms: u64, max_ms: u64) -> Self {
        DoublingDelay {
            current_ms: min_ms.min(max_ms),
            min_ms: min_ms.min(max_ms),
            max_ms,
        }
    }

    /// The next wait.
    pub fn next_delay(&mut self) -> Duration {
        let d = self.current_ms;
        self.current_ms = (self.current_ms * 2).min(self.max_ms);
        Duration::from_millis(d)
    }

    /// Back to the shortest wait.
    pub fn reset(&mut self) {
        self.current_ms = self.min_ms;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_delays_grow_within_jitter_bounds_and_cap() {
        for attempts in 1..12u32 {
            let full = (100u64 << (attempts - 1)).min(10_000);
            for _ in 0..50 {
                let d = retry_delay(attempts, 100, 10_000).as_millis() as u64;
                assert!(
                    d >= full / 2 && d <= full,
                    "attempt {attempts}: {d} not in [{}, {full}]",
                    full / 2
                );
            }
        }
        assert!(retry_delay(200, 100, 10_000) <= Duration::from_millis(10_000));
    }

    #[test]
    fn doubling_delay_doubles_and_resets() {
        let mut b = DoublingDelay::new(10, 50);
        let got: Vec<u64> = (0..5).map(|_| b.next_delay().as_millis() as u64).collect();
        assert_eq!(got, vec![10, 20, 40, 50, 50]);
        b.reset();
        assert_eq!(b.next_delay(), Duration::from_millis(10));
    }
}
