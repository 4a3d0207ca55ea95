//! Delivered events per second over the last minute, for the overview.
//! Pure: no database, no clock of its own (the caller passes the time).
//!
//! Two sources, because the relay's two retention modes leave different
//! traces in the database:
//! * retention mode keeps each delivered row with its `processed_at`: the
//!   rows delivered in the last minute are counted (at most
//!   [`KEPT_BOUND`] of them, newest first, through the processed-rows
//!   index; past that, the rate is the bound over the time its newest rows
//!   took);
//! * the default deletes each row as it is delivered, leaving only
//!   PostgreSQL's count of the table's deleted rows (`n_tup_del`, which
//!   discards and the retention cleaner's deletes also raise). The console
//!   samples it at each overview read ([`Deletions`]) and gives the rate
//!   between its oldest sample of the last minute and now.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// The window the rate covers.
pub const WINDOW: Duration = Duration::from_secs(60);
/// Kept rows counted at most.
pub const KEPT_BOUND: i64 = 10_000;
/// Shortest span a deletion rate is given over.
const SHORTEST: Duration = Duration::from_secs(2);

/// The delivery rate and where it comes from.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rate {
    pub per_sec: f64,
    /// Seconds it was measured over.
    pub over_s: f64,
    pub source: Source,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// Rows kept with `processed_at` (retention mode).
    KeptRows,
    /// The table's deleted-row count (delete mode).
    Deletions,
}

impl Rate {
    /// As the overview shows it: `512.3/s (60 s, kept rows)`: the
    /// rate, the seconds it covers up to now, and its source.
    pub fn shown(&self) -> String {
        let source = match self.source {
            Source::KeptRows => "kept rows",
            Source::Deletions => "deletions",
        };
        format!("{:.1}/s ({:.0} s, {source})", self.per_sec, self.over_s)
    }
}

/// The rate from kept rows: `count` rows delivered within the window,
/// newest first, at most [`KEPT_BOUND`], the oldest of them `oldest_age_s`
/// ago. None when none was delivered in the window.
pub fn from_kept(count: i64, oldest_age_s: Option<f64>) -> Option<Rate> {
    if count == 0 {
        return None;
    }
    let over_s = if count >= KEPT_BOUND {
        // The bound was reached: the newest rows took this long.
        oldest_age_s?.max(0.001)
    } else {
        WINDOW.as_secs_f64()
    };
    Some(Rate {
        per_sec: count as f64 / over_s,
        over_s,
        source: Source::KeptRows,
    })
}

/// Samples of the table's deleted-row count, the newest last.
#[derive(Debug, Default)]
pub struct Deletions {
    samples: VecDeque<(Instant, i64)>,
}

impl Deletions {
    /// Notes that `total` rows had been deleted at `now`, and returns the
    /// rate since the oldest sample still inside the window (or the one
    /// just before it), once that spans at least two seconds.
    pub fn observe(&mut self, now: Instant, total: i64) -> Option<Rate> {
        // Statistics reset (or a new table): earlier samples mean nothing.
        if self.samples.back().is_some_and(|(_, t)| total < *t) {
            self.samples.clear();
        }
        self.samples.push_back((now, total));
        // Keep one sample at or just past the window's start.
        while self.samples.len() > 2 && now.duration_since(self.samples[1].0) >= WINDOW {
            self.samples.pop_front();
        }
        let (then, before) = *self.samples.front()?;
        let span = now.duration_since(then);
        if span < SHORTEST {
            return None;
        }
        Some(Rate {
            per_sec: (total - before) as f64 / span.as_secs_f64(),
            over_s: span.as_secs_f64(),
            source: Source::Deletions,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kept_rows_within_the_bound_are_spread_over_the_minute() {
        let r = from_kept(600, Some(59.0)).unwrap();
        assert_eq!(r.per_sec, 10.0);
        assert_eq!(r.over_s, 60.0);
        assert_eq!(from_kept(0, None), None);
    }

    #[test]
    fn past_the_bound_kept_rows_give_the_rate_of_the_newest() {
        let r = from_kept(KEPT_BOUND, Some(4.0)).unwrap();
        assert_eq!(r.per_sec, 2_500.0);
        assert_eq!(r.over_s, 4.0);
    }

    #[test]
    fn deletions_need_two_seconds_then_give_the_rate_over_the_last_minute() {
        let t0 = Instant::now();
        let mut d = Deletions::default();
        assert_eq!(d.observe(t0, 1_000), None);
        assert_eq!(d.observe(t0 + Duration::from_secs(1), 1_100), None);
        let r = d.observe(t0 + Duration::from_secs(4), 1_400).unwrap();
        assert_eq!(r.per_sec, 100.0);
        assert_eq!(r.source, Source::Deletions);
        // Three minutes of samples every 3 s at 50/s after 100/s at first:
        // only the last minute counts.
        let mut total = 1_400;
        let mut at = t0 + Duration::from_secs(4);
        let mut last = None;
        for _ in 0..60 {
            at += Duration::from_secs(3);
            total += 150;
            last = d.observe(at, total);
        }
        let r = last.unwrap();
        assert!((r.per_sec - 50.0).abs() < 1e-9, "{r:?}");
        assert!(r.over_s >= 60.0 && r.over_s < 63.0, "{r:?}");
    }

    #[test]
    fn a_statistics_reset_starts_the_samples_again() {
        let t0 = Instant::now();
        let mut d = Deletions::default();
        d.observe(t0, 5_000);
        assert_eq!(d.observe(t0 + Duration::from_secs(5), 10), None);
        let r = d.observe(t0 + Duration::from_secs(10), 60).unwrap();
        assert_eq!(r.per_sec, 10.0);
    }
}
