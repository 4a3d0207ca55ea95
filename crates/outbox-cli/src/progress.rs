//! A progress line on stderr (events done, rate, pending), redrawn in
//! place. Silent when stderr is not a terminal, so logs and pipes never see
//! it.

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

/// Redraws at most this often.
const REDRAW: Duration = Duration::from_millis(200);

/// Weight of the newest rate sample (smooths the shown rate).
const SMOOTHING: f64 = 0.3;

/// A progress line.
#[derive(Debug)]
pub struct Progress {
    label: &'static str,
    enabled: bool,
    drawn: bool,
    last: Option<(Instant, u64)>,
    rate: Option<f64>,
}

impl Progress {
    /// A line labelled `label`, drawn only if stderr is a terminal and
    /// `wanted` (e.g. not when stdout shares the terminal).
    pub fn stderr(label: &'static str, wanted: bool) -> Self {
        Progress {
            label,
            enabled: wanted && std::io::stderr().is_terminal(),
            drawn: false,
            last: None,
            rate: None,
        }
    }

    /// Records `done` events so far and `pending` left (if known), and
    /// redraws if it is time.
    pub fn update(&mut self, done: u64, pending: Option<u64>) {
        if !self.enabled {
            return;
        }
        let now = Instant::now();
        match self.last {
            // Draw at once, then at most every REDRAW.
            None => self.last = Some((now, done)),
            Some((at, before)) => {
                let dt = now.duration_since(at);
                if dt < REDRAW {
                    return;
                }
                let sample = done.saturating_sub(before) as f64 / dt.as_secs_f64();
                self.rate = Some(match self.rate {
                    None => sample,
                    Some(r) => r + SMOOTHING * (sample - r),
                });
                self.last = Some((now, done));
            }
        }
        let line = render(self.label, done, self.rate, pending);
        let mut err = std::io::stderr().lock();
        let _ = write!(err, "\r\x1b[2K{line}");
        let _ = err.flush();
        self.drawn = true;
    }

    /// Clears the line, so what follows starts on a clean line.
    pub fn finish(&mut self) {
        if self.drawn {
            let mut err = std::io::stderr().lock();
            let _ = write!(err, "\r\x1b[2K");
            let _ = err.flush();
            self.drawn = false;
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.finish();
    }
}

/// `1234567` as `1,234,567`.
fn grouped(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// The line's text.
fn render(label: &str, done: u64, rate: Option<f64>, pending: Option<u64>) -> String {
    let mut line = format!("{label}: {} events done", grouped(done));
    if let Some(pending) = pending {
        let total = done + pending;
        let pct = if total == 0 {
            100.0
        } else {
            done as f64 * 100.0 / total as f64
        };
        line = format!("{label}: {pct:>3.0}% {} events done", grouped(done));
        line.push_str(&format!(", {} pending", grouped(pending)));
    }
    if let Some(rate) = rate {
        line.push_str(&format!(", {}/s", grouped(rate.round().max(0.0) as u64)));
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_grouped_and_the_line_reads_well() {
        assert_eq!(grouped(0), "0");
        assert_eq!(grouped(999), "999");
        assert_eq!(grouped(1_000), "1,000");
        assert_eq!(grouped(1_234_567), "1,234,567");
        assert_eq!(
            render("relay", 1500, None, None),
            "relay: 1,500 events done"
        );
        assert_eq!(
            render("relay", 750, Some(1234.4), Some(250)),
            "relay:  75% 750 events done, 250 pending, 1,234/s"
        );
    }

    #[test]
    fn a_disabled_line_draws_nothing() {
        let mut p = Progress::stderr("x", false);
        p.update(10, Some(5));
        assert!(!p.drawn);
    }
}
