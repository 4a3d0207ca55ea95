//! The relay's CPU: its process (`/proc/PID/task/*/schedstat`) and its
//! database sessions (by `application_name`), read as `bench held-snapshot`
//! reads them; `bench latency` and `bench e2e` report it beside their
//! figures.

use std::collections::HashMap;

use anyhow::Result;
use serde_json::{json, Value};
use sqlx::PgPool;

use super::child_relay::ChildRelay as Relay;
use super::held_snapshot::{cpu_seconds, database_cpu};

/// CPU seconds so far of the relay's process and of its database sessions.
#[derive(Default)]
pub struct Cpu {
    seen: HashMap<u32, (usize, f64)>,
}

impl Cpu {
    pub async fn now(&mut self, pool: &PgPool, relay: &Relay) -> Result<(f64, f64)> {
        // NaN (null in the JSON) where it cannot be read: a server on
        // another machine.
        let process = cpu_seconds(relay.pid()).unwrap_or(f64::NAN);
        let sessions = database_cpu(pool, &mut self.seen)
            .await?
            .map_or(f64::NAN, |by_class| by_class[0]);
        Ok((process, sessions))
    }
}

/// Share of one core the relay spent between two readings (process,
/// sessions) `secs` apart; NaN where either could not be read.
pub fn core_share(before: (f64, f64), after: (f64, f64), secs: f64) -> f64 {
    (after.0 - before.0 + after.1 - before.1) / secs.max(1e-9)
}

/// The relay's CPU over a run of `events` events lasting `secs`.
pub fn cpu_report(before: (f64, f64), after: (f64, f64), events: u64, secs: f64) -> Value {
    let (process, sessions) = (after.0 - before.0, after.1 - before.1);
    let per = |s: f64| s / events.max(1) as f64 * 1e6;
    json!({
        "relay_process_us_per_event": per(process),
        "relay_sessions_us_per_event": per(sessions),
        "relay_us_per_event": per(process + sessions),
        "relay_core_share": core_share(before, after, secs),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_is_reported_per_event_and_as_a_share_of_a_core() {
        // 0.2 s of process and 0.3 s of sessions for 1,000 events in 2 s.
        let r = cpu_report((1.0, 2.0), (1.2, 2.3), 1_000, 2.0);
        let f = |k: &str| r[k].as_f64().unwrap();
        assert!(
            (f("relay_process_us_per_event") - 200.0).abs() < 1e-6,
            "{r}"
        );
        assert!(
            (f("relay_sessions_us_per_event") - 300.0).abs() < 1e-6,
            "{r}"
        );
        assert!((f("relay_us_per_event") - 500.0).abs() < 1e-6, "{r}");
        assert!((f("relay_core_share") - 0.25).abs() < 1e-9, "{r}");
        // Unreadable (a remote server): null, never a made-up zero.
        let r = cpu_report((1.0, f64::NAN), (1.2, f64::NAN), 1_000, 2.0);
        assert!(r["relay_sessions_us_per_event"].is_null(), "{r}");
    }
}
