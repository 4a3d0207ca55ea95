//! Small measurement helpers: percentiles and the process's peak memory.

use std::time::Duration;

/// The `q`-quantile (0..=1) of sorted samples, nearest-rank.
pub fn quantile(sorted: &[Duration], q: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

/// Milliseconds as a float.
pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// The median of a few figures.
pub fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(|a, b| a.total_cmp(b));
    if xs.is_empty() {
        return 0.0;
    }
    let n = xs.len();
    if n % 2 == 1 {
        xs[n / 2]
    } else {
        (xs[n / 2 - 1] + xs[n / 2]) / 2.0
    }
}

/// Resets the kernel's peak-RSS mark of this process (Linux
/// `clear_refs` 5), so the next [`peak_rss_kib`] covers only what follows.
pub fn reset_peak_rss() -> bool {
    std::fs::write("/proc/self/clear_refs", "5").is_ok()
}

/// Peak resident memory of this process (`VmHWM`), KiB.
pub fn peak_rss_kib() -> Option<u64> {
    peak_rss_kib_of("self")
}

/// Peak resident memory of process `pid` (a number, or `self`), KiB.
pub fn peak_rss_kib_of(pid: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// CPU time this process has used so far, all threads, user and system
/// (`/proc/self/stat`, in the kernel's fixed 1/100 s ticks).
pub fn cpu_secs() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the parenthesised command name; utime and stime are the
    // 14th and 15th fields of the line.
    let rest = stat.rsplit_once(')')?.1;
    let mut fields = rest.split_whitespace().skip(11);
    let utime: u64 = fields.next()?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some((utime + stime) as f64 / 100.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_use_nearest_rank() {
        let xs: Vec<Duration> = (1..=100).map(Duration::from_millis).collect();
        assert_eq!(quantile(&xs, 0.5), Duration::from_millis(50));
        assert_eq!(quantile(&xs, 0.99), Duration::from_millis(99));
        assert_eq!(quantile(&xs, 1.0), Duration::from_millis(100));
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
    }

    #[test]
    fn cpu_time_is_readable_and_grows() {
        let before = cpu_secs().unwrap();
        let mut x = 0u64;
        for i in 0..1_000_000u64 {
            x = x.wrapping_mul(31).wrapping_add(std::hint::black_box(i));
        }
        std::hint::black_box(x);
        assert!(cpu_secs().unwrap() >= before);
    }

    #[test]
    fn peak_rss_is_readable_here() {
        assert!(peak_rss_kib().unwrap() > 0);
    }
}
