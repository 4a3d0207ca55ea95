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

/// `--schema` when the flag is absent. No command-line argument can hold a
/// NUL byte, so an explicit `--schema ''` stays distinguishable (and is
/// refused as empty).
pub const SCHEMA_UNSET: &str = "\0";

#[derive(Debug, Args)]
pub struct Global {
    /// TOML config file; environment variables and flags override it (see
    /// docs/configuration.md).
    #[arg(long, env = "OUTBOX_CONFIG", global = true, value_name = "PATH")]
    pub config: Option<std::path::PathBuf>,
    /// PostgreSQL URL, e.g. postgres://user:pass@host:5432/db
    /// [env: OUTBOX_DATABASE_URL, DATABASE_URL].
    #[arg(long, global = true, value_name = "URL")]
    pub database_url: Option<String>,
    /// Schema holding the outbox tables: 1-63 lowercase letters, digits or
    /// _, not a PostgreSQL keyword [env: OUTBOX_SCHEMA] [default: public].
    #[arg(
        long,
        global = true,
        value_name = "NAME",
        default_value = SCHEMA_UNSET,
        hide_default_value = true
    )]
    pub schema: String,
    /// Log level (error, warn, info, debug, trace) or a RUST_LOG-style
    /// filter; wins over RUST_LOG [env: OUTBOX_LOG_LEVEL] [default: info for
    /// relay, warn otherwise].
    #[arg(long, global = true, value_name = "LEVEL")]
    pub log_level: Option<String>,
    /// Log line format [env: OUTBOX_LOG_FORMAT] [default: text].
    #[arg(long, global = true, value_enum)]
    pub log_format: Option<crate::config::LogFormat>,
    /// Same as --log-format json.
    #[arg(long, global = true, hide = true)]
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
    /// Serve the web console: overview, stuck aggregates, events, dead
    /// letters, pause / resume (docs/console.md).
    Console(crate::console::ConsoleArgs),
}

#[derive(Debug, Args)]
pub struct MigrateArgs {
    /// Ownership partitions for a new schema (fixed once created).
    #[arg(long)]
    pub partitions: Option<u32>,
    /// How rows inserted by plain SQL wake relays in other processes:
    /// `idle` (default for a new schema) sends one NOTIFY per inserting
    /// statement, only while a relay has said it is idle, so busy relays
    /// cost producers nothing; `every-insert` is the seed's per-row trigger
    /// (a NOTIFY per row: every commit takes PostgreSQL's global notify
    /// lock, about a third less producer throughput at 8 producers); `off`
    /// leaves relays to their poll (at most `poll_max_ms` late). Left out,
    /// an existing schema keeps its mode.
    #[arg(long, value_name = "MODE", value_parser = parse_wakeup_trigger)]
    pub wakeup_trigger: Option<outbox::WakeupTrigger>,
    /// Older switch: `true` is `--wakeup-trigger every-insert`, `false` is
    /// `--wakeup-trigger idle`.
    #[arg(long, conflicts_with = "wakeup_trigger")]
    pub notify_trigger: Option<bool>,
}

fn parse_wakeup_trigger(s: &str) -> Result<outbox::WakeupTrigger, String> {
    use outbox::WakeupTrigger as W;
    [W::Idle, W::EveryInsert, W::Off]
        .into_iter()
        .find(|m| m.name() == s)
        .ok_or_else(|| format!("{s:?} is not a wake-up mode: use idle, every-insert or off"))
}

/// Flags of `outbox relay`. Each one overrides the config file and the
/// environment (see docs/configuration.md for the keys and variables).
#[derive(Debug, Args)]
pub struct RelayArgs {
    // Where to publish: every form of the publishers' table.
    #[arg(long, value_name = "SPEC", help = crate::publisher::help())]
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
}

#[derive(Debug, Args)]
pub struct StatusArgs {
    /// Print one JSON object.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Orders to create, 1 to 10000000.
    #[arg(long, default_value_t = 2000, value_parser = clap::value_parser!(u32).range(1..=10_000_000))]
    pub orders: u32,
    /// Concurrent producers, 1 to 64.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub producers: u32,
    /// Do not print the events, only the summary.
    #[arg(long)]
    pub quiet: bool,
}
