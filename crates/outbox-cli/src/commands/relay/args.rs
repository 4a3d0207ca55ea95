//! The flags of `outbox relay` (and of `outbox config check`, which shows
//! what the relay would run with), and the settings they give.

use crate::config::Flags;

/// Flags of `outbox relay`. Each one overrides the config file and the
/// environment (see docs/configuration.md for the keys and variables).
#[derive(Debug, clap::Args)]
pub struct RelayArgs {
    // Where to publish: every form of the publishers' table.
    #[arg(long, value_name = "SPEC", help = outbox_publishers::registry::help())]
    pub publisher: Option<String>,
    /// Message format: plain (the outbox's own headers), cloudevents-binary
    /// or cloudevents-structured (CloudEvents 1.0) [env:
    /// OUTBOX_PUBLISHER_FORMAT] [default: plain].
    #[arg(long, value_name = "FORMAT")]
    pub format: Option<String>,
    /// The CloudEvents source attribute; {schema} is the schema's name [env:
    /// OUTBOX_PUBLISHER_CLOUDEVENTS_SOURCE] [default: /outbox/{schema}].
    #[arg(long, value_name = "URI-REFERENCE")]
    pub cloudevents_source: Option<String>,
    /// Exit 0 once nothing is pending (all delivered or dead-lettered).
    #[arg(long)]
    pub drain: bool,
    /// Unique name of this instance; restarting with the same name takes
    /// its partitions back at once.
    #[arg(long)]
    pub instance_id: Option<String>,
    /// Most events per batch.
    #[arg(long)]
    pub batch_size: Option<usize>,
    /// Failed attempts before an event is dead-lettered.
    #[arg(long)]
    pub max_attempts: Option<u32>,
    /// Partition lease length, milliseconds.
    #[arg(long)]
    pub lease_ms: Option<u64>,
    /// Longest idle poll interval, milliseconds.
    #[arg(long)]
    pub poll_max_ms: Option<u64>,
    /// While events arrive at least one per this many milliseconds, claim
    /// once per this long; slower arrivals are claimed as each commit wakes
    /// the relay. Longer: less CPU per event; shorter: lower latency.
    #[arg(long, value_name = "MS")]
    pub latency_budget_ms: Option<u64>,
    /// First retry backoff, milliseconds (doubles per attempt).
    #[arg(long)]
    pub backoff_base_ms: Option<u64>,
    /// Keep processed rows (retention mode) instead of deleting them.
    #[arg(long)]
    pub keep_processed: bool,
    /// Seconds to wait for a graceful stop after SIGTERM/SIGINT [default:
    /// 30].
    #[arg(long, value_name = "SECS")]
    pub shutdown_timeout_secs: Option<u64>,
    /// Serve /metrics, /healthz and /readyz on this address, e.g.
    /// 127.0.0.1:9090 [env: OUTBOX_HTTP_ADDR].
    #[arg(long, value_name = "HOST:PORT")]
    pub http_addr: Option<String>,
    /// Also serve the web console (docs/console.md) on the --http-addr
    /// server, under `outbox console`'s rules: off loopback it needs a
    /// password (OUTBOX_CONSOLE_PASSWORD or --console-password-file).
    #[arg(long)]
    pub console: bool,
    /// File holding the console's password (its trailing newline ignored);
    /// wins over OUTBOX_CONSOLE_PASSWORD.
    #[arg(long, value_name = "PATH", requires = "console")]
    pub console_password_file: Option<std::path::PathBuf>,
    /// With [[source]] entries: the source the console shows, an entry
    /// naming one schema or ENTRY/SCHEMA for a schema a pattern finds
    /// (needed unless one entry names one schema).
    #[arg(long, value_name = "NAME", requires = "console")]
    pub console_source: Option<String>,
    /// Stop (gracefully) once process PID, our parent, is gone: what `outbox
    /// bench` asks of the relays it starts, so that none outlives it.
    #[arg(long, value_name = "PID", hide = true)]
    pub exit_with_parent: Option<u32>,
}

impl RelayArgs {
    /// The settings these flags give.
    pub fn flags(&self, l: &mut Flags) {
        l.set_str("publisher.spec", "--publisher", self.publisher.as_deref());
        l.set_str("publisher.format", "--format", self.format.as_deref());
        l.set_str(
            "publisher.cloudevents_source",
            "--cloudevents-source",
            self.cloudevents_source.as_deref(),
        );
        if self.drain {
            l.set("drain", "--drain", true);
        }
        l.set_str(
            "relay.instance_id",
            "--instance-id",
            self.instance_id.as_deref(),
        );
        let batch_size = self.batch_size.map(|v| v as u64);
        l.set_int("relay.batch_size", "--batch-size", batch_size);
        let max_attempts = self.max_attempts.map(u64::from);
        l.set_int("relay.max_attempts", "--max-attempts", max_attempts);
        l.set_int("relay.lease_ms", "--lease-ms", self.lease_ms);
        l.set_int("relay.poll_max_ms", "--poll-max-ms", self.poll_max_ms);
        let budget = self.latency_budget_ms;
        l.set_int("relay.latency_budget_ms", "--latency-budget-ms", budget);
        let backoff = self.backoff_base_ms;
        l.set_int("relay.backoff_base_ms", "--backoff-base-ms", backoff);
        if self.keep_processed {
            l.set("relay.retention", "--keep-processed", "keep");
        }
        let timeout = self.shutdown_timeout_secs;
        l.set_int("shutdown_timeout_secs", "--shutdown-timeout-secs", timeout);
        l.set_str("http.addr", "--http-addr", self.http_addr.as_deref());
    }
}
