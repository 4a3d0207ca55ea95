//! Command-line interface.

use clap::{Args, Parser, Subcommand};

/// A transactional outbox for PostgreSQL: write events in your transaction,
/// relay them to a broker at least once, in order per aggregate.
#[derive(Debug, Parser)]
#[command(name = "outbox", version)]
pub struct Cli {
    #[command(flatten)]
    pub global: Global,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Args)]
pub struct Global {
    /// PostgreSQL URL, e.g. postgres://user:pass@host:5432/db.
    #[arg(long, env = "DATABASE_URL", global = true, hide_env_values = true)]
    pub database_url: Option<String>,
    /// Schema holding the outbox tables.
    #[arg(long, env = "OUTBOX_SCHEMA", global = true, default_value = "public")]
    pub schema: String,
    /// Log level filter (error, warn, info, debug, trace); RUST_LOG wins.
    #[arg(long, global = true)]
    pub log_level: Option<String>,
    /// Log as JSON lines.
    #[arg(long, global = true)]
    pub log_json: bool,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Create or update the outbox tables (idempotent).
    Migrate(MigrateArgs),
    /// Run the relay: publish committed events to a broker.
    Relay(RelayArgs),
    /// Show pending and dead-lettered counts and partition owners.
    Status(StatusArgs),
    /// Run a small order service on a throwaway PostgreSQL and relay its
    /// events to stdout.
    Demo(DemoArgs),
    /// List, retry or discard dead-lettered events.
    #[command(subcommand)]
    DeadLetters(crate::commands::dead_letters::DeadLettersCommand),
    /// Delete processed rows older than the retention period (retention
    /// mode), in small batches.
    Cleanup(crate::commands::cleanup::CleanupArgs),
    /// Configuration tools.
    #[command(subcommand)]
    Config(crate::commands::config::ConfigCommand),
    /// Measure drain throughput, commit-to-ack latency and producer cost
    /// against a reference on the same server.
    Bench(crate::commands::bench::BenchArgs),
}

#[derive(Debug, Args)]
pub struct MigrateArgs {
    /// Ownership partitions for a new schema (fixed once created).
    #[arg(long)]
    pub partitions: Option<u32>,
    /// Install (true) or remove (false) the seed's per-row NOTIFY trigger.
    /// It slows producers; only for relays that need it.
    #[arg(long)]
    pub notify_trigger: Option<bool>,
}

#[derive(Debug, Args)]
pub struct RelayArgs {
    /// Where to publish: `stdout`, or `file:PATH` (JSON lines, fsynced
    /// before acknowledging).
    #[arg(long, default_value = "stdout")]
    pub publisher: String,
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
    /// First retry backoff, milliseconds (doubles per attempt).
    #[arg(long)]
    pub backoff_base_ms: Option<u64>,
    /// Keep processed rows (retention mode) instead of deleting them.
    #[arg(long)]
    pub keep_processed: bool,
    /// Seconds to wait for a graceful stop after SIGTERM/SIGINT.
    #[arg(long, default_value_t = 30)]
    pub shutdown_timeout_secs: u64,
}

#[derive(Debug, Args)]
pub struct StatusArgs {
    /// Print one JSON object.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Orders to create.
    #[arg(long, default_value_t = 2000)]
    pub orders: u32,
    /// Concurrent producers.
    #[arg(long, default_value_t = 4)]
    pub producers: u32,
    /// Do not print the events, only the summary.
    #[arg(long)]
    pub quiet: bool,
}
