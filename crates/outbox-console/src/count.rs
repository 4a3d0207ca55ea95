//! A count the console shows without reading a whole table: exact up to a
//! bound, beyond it "at least the bound", with PostgreSQL's estimate when
//! it says more. Pure: no database, no I/O.

/// Rows a count reads at most before it stops and says "at least".
pub const COUNT_BOUND: i64 = 10_000;

/// What the console knows of a number of rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Count {
    /// Counted to the end.
    Exact(i64),
    /// The count stopped at `bound` rows; `estimate` is PostgreSQL's figure
    /// for the whole (from its last vacuum or analyze) when it is larger.
    AtLeast { bound: i64, estimate: Option<i64> },
}

impl Count {
    /// `counted` rows found by a count that reads at most `bound + 1`
    /// (one more than the bound, so reaching the bound exactly is still
    /// exact), and an estimate of the total.
    pub fn from_bounded(counted: i64, bound: i64, estimate: Option<i64>) -> Count {
        if counted <= bound {
            Count::Exact(counted)
        } else {
            Count::AtLeast {
                bound,
                estimate: estimate.filter(|e| *e > bound),
            }
        }
    }

    /// As the console shows it: `1,234`, `10,000+`, `~120,000`.
    pub fn shown(&self) -> String {
        match *self {
            Count::Exact(n) => thousands(n),
            Count::AtLeast {
                estimate: Some(e), ..
            } => format!("~{}", thousands(round_estimate(e))),
            Count::AtLeast { bound, .. } => format!("{}+", thousands(bound)),
        }
    }
}

/// An estimate to two significant figures: the digits past them are noise.
fn round_estimate(n: i64) -> i64 {
    let mut unit = 1;
    while n / unit >= 100 {
        unit *= 10;
    }
    (n + unit / 2) / unit * unit
}

/// `n` with a comma between each group of three digits.
pub fn thousands(n: i64) -> String {
    let digits = n.unsigned_abs().to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3 + 1);
    if n < 0 {
        out.push('-');
    }
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_count_within_the_bound_is_exact_even_at_the_bound() {
        assert_eq!(Count::from_bounded(0, 10, Some(500)), Count::Exact(0));
        assert_eq!(Count::from_bounded(10, 10, Some(500)).shown(), "10");
        assert_eq!(Count::from_bounded(1234, 10_000, None).shown(), "1,234");
    }

    #[test]
    fn past_the_bound_the_estimate_is_shown_rounded_only_when_it_says_more() {
        let c = Count::from_bounded(10_001, 10_000, Some(123_456));
        assert_eq!(c.shown(), "~120,000");
        // A stale estimate below what was counted is not shown.
        assert_eq!(
            Count::from_bounded(10_001, 10_000, Some(3_000)).shown(),
            "10,000+"
        );
        assert_eq!(Count::from_bounded(10_001, 10_000, None).shown(), "10,000+");
    }

    #[test]
    fn thousands_groups_digits_in_threes() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1_000), "1,000");
        assert_eq!(thousands(1_234_567), "1,234,567");
        assert_eq!(thousands(-45_000), "-45,000");
        assert_eq!(round_estimate(99), 99);
        assert_eq!(round_estimate(1_049_999), 1_000_000);
        assert_eq!(round_estimate(1_050_000), 1_100_000);
    }
}
