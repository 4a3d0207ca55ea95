//! The bench's own CPU during a drain: the consumer alone while the relay
//! drains, the broker's client and the consumer during the reference (the
//! relay's own CPU: `bench/relay_cpu.rs`).

use serde_json::{json, Value};

use crate::held_snapshot::cpu_seconds;

/// CPU seconds so far of the bench's own process: the consumer (the
/// webhook receiver) and, during the reference, the broker's client. NaN
/// where it cannot be read.
pub fn bench_cpu_seconds() -> f64 {
    cpu_seconds(std::process::id()).unwrap_or(f64::NAN)
}

/// The bench process's CPU per event of a drain of `events`: `relay`
/// seconds while the relay drained (its consumer alone) and `reference`
/// seconds while the broker's client published (client and consumer), so
/// the client's own share is their difference.
pub fn bench_report(relay: f64, reference: f64, events: u64) -> Value {
    let per = |s: f64| s / events.max(1) as f64 * 1e6;
    json!({
        "while_relay_us_per_event": per(relay),
        "while_reference_us_per_event": per(reference),
        "reference_client_us_per_event": per(reference - relay),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_clients_share_is_what_the_bench_spent_beyond_its_consumer() {
        let b = bench_report(0.5, 1.25, 50_000);
        let f = |k: &str| b[k].as_f64().unwrap();
        assert!((f("while_relay_us_per_event") - 10.0).abs() < 1e-9, "{b}");
        assert!(
            (f("while_reference_us_per_event") - 25.0).abs() < 1e-9,
            "{b}"
        );
        assert!(
            (f("reference_client_us_per_event") - 15.0).abs() < 1e-9,
            "{b}"
        );
    }
}
