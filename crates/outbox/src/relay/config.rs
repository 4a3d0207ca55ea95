//! Relay settings.

use serde::{Deserialize, Serialize};

use crate::error::{range, Error, Result};

/// What happens to an event once the broker acknowledged it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Retention {
    /// Delete the row (default): the table stays small and free of bloat.
    #[default]
    Delete,
    /// Keep the row with `processed_at` set; a cleaner removes old rows.
    Keep,
}

/// Relay settings. Every duration carries its unit in its name.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RelayConfig {
    /// Unique name of this relay instance. Default: `HOST-PID-RANDOM`.
    /// Restarting with the same id takes its partitions back at once.
    pub instance_id: Option<String>,
    /// Most events claimed and published per batch.
    pub batch_size: usize,
    /// Failed attempts after which an event is dead-lettered.
    pub max_attempts: u32,
    /// Backoff after the first failed attempt; doubles per attempt, with
    /// jitter.
    pub backoff_base_ms: u64,
    /// Longest backoff between attempts.
    pub backoff_max_ms: u64,
    /// Partition lease length; a crashed instance's partitions move after it.
    pub lease_ms: u64,
    /// First idle poll interval; doubles while idle.
    pub poll_min_ms: u64,
    /// Longest idle poll interval (the worst-case pick-up delay without a
    /// wake-up).
    pub poll_max_ms: u64,
    /// While events arrive at least one per this long, the relay claims
    /// once per this long (an event waits at most this for its claim);
    /// slower arrivals are claimed as each producer's commit wakes it. A
    /// longer budget costs less CPU per event at moderate rates, a shorter
    /// one lowers their latency (docs/performance.md has the curve).
    pub latency_budget_ms: u64,
    /// Longest wait between tries while the broker or database is down.
    pub outage_backoff_max_ms: u64,
    /// A publish call that takes longer counts as a transport outage.
    pub publish_timeout_ms: u64,
    /// Delete acknowledged rows, or keep them.
    pub retention: Retention,
    /// Listen for `NOTIFY` wake-ups from producers in other processes.
    pub listen: bool,
}

impl Default for RelayConfig {
    fn default() -> Self {
        RelayConfig {
            instance_id: None,
            batch_size: 500,
            max_attempts: 10,
            backoff_base_ms: 500,
            backoff_max_ms: 300_000,
            lease_ms: 10_000,
            poll_min_ms: 5,
            poll_max_ms: 500,
            latency_budget_ms: 4,
            outage_backoff_max_ms: 5_000,
            publish_timeout_ms: 30_000,
            retention: Retention::Delete,
            listen: true,
        }
    }
}

/// The shortest wait after an outage, whatever `poll_min_ms` says: a
/// database or broker that is down is not asked again within this.
pub(crate) const OUTAGE_BACKOFF_MIN_MS: u64 = 20;

impl RelayConfig {
    /// How failed events are retried.
    pub(crate) fn retry_policy(&self) -> crate::relay::deliver::outcomes::RetryPolicy {
        crate::relay::deliver::outcomes::RetryPolicy {
            max_attempts: self.max_attempts,
            backoff_base_ms: self.backoff_base_ms,
            backoff_max_ms: self.backoff_max_ms,
        }
    }

    /// Checks every field; the error names the field, the value and the
    /// allowed range.
    pub fn validate(&self) -> Result<()> {
        if let Some(id) = &self.instance_id {
            if id.trim().is_empty() || id.len() > 200 {
                return Err(Error::invalid(
                    "instance_id",
                    format!("{id:?} must be 1 to 200 characters"),
                ));
            }
        }
        range("batch_size", self.batch_size as u64, 1, 100_000)?;
        range("max_attempts", u64::from(self.max_attempts), 1, 1_000)?;
        range("backoff_base_ms", self.backoff_base_ms, 1, 3_600_000)?;
        range(
            "backoff_max_ms",
            self.backoff_max_ms,
            self.backoff_base_ms,
            86_400_000,
        )?;
        range("lease_ms", self.lease_ms, 500, 600_000)?;
        range("poll_min_ms", self.poll_min_ms, 1, 60_000)?;
        range("poll_max_ms", self.poll_max_ms, self.poll_min_ms, 600_000)?;
        range("latency_budget_ms", self.latency_budget_ms, 1, 1_000)?;
        range(
            "outage_backoff_max_ms",
            self.outage_backoff_max_ms,
            1,
            600_000,
        )?;
        range("publish_timeout_ms", self.publish_timeout_ms, 10, 3_600_000)?;
        Ok(())
    }

    /// The instance id, or a generated one.
    pub fn resolved_instance_id(&self) -> String {
        self.instance_id.clone().unwrap_or_else(|| {
            let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
                .map(|h| h.trim().to_owned())
                .ok()
                .filter(|h| !h.is_empty())
                .unwrap_or_else(|| "relay".to_owned());
            format!(
                "{host}-{}-{:04x}",
                std::process::id(),
                rand::random::<u16>()
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_bad_values_name_the_field() {
        RelayConfig::default().validate().unwrap();
        let bad = RelayConfig {
            batch_size: 0,
            ..Default::default()
        };
        let msg = bad.validate().unwrap_err().to_string();
        assert!(msg.contains("batch_size") && msg.contains('0'), "{msg}");
        let bad = RelayConfig {
            poll_max_ms: 1,
            poll_min_ms: 5,
            ..Default::default()
        };
        assert!(bad
            .validate()
            .unwrap_err()
            .to_string()
            .contains("poll_max_ms"));
    }

    #[test]
    fn unknown_keys_are_rejected() {
        let err = serde_json::from_str::<RelayConfig>(r#"{"batch_sise": 3}"#).unwrap_err();
        assert!(err.to_string().contains("batch_sise"), "{err}");
    }
}
