//! Command-line interface: the program's flags and commands (each
//! command's own flags live beside it in `commands/`), what they ask of the
//! configuration, and which command runs.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use clap::{Args, Parser, Subcommand};

use crate::commands;
use crate::commands::cleanup::CleanupArgs;
use crate::commands::config::ConfigCommand;
use crate::commands::dead_letters::DeadLettersCommand;
use crate::commands::demo::DemoArgs;
use crate::commands::healthcheck::HealthcheckArgs;
use crate::commands::migrate::MigrateArgs;
use crate::commands::relay::RelayArgs;
use crate::commands::status::StatusArgs;
use crate::config::{self, Flags};
use crate::ctx::Ctx;
#[cfg(feature = "bench")]
use outbox_bench::BenchArgs;

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
    pub config: Option<PathBuf>,
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
    #[arg(
        long,
        global = true,
        value_name = "FORMAT",
        value_parser = clap::builder::PossibleValuesParser::new(config::LogFormat::NAMES)
    )]
    pub log_format: Option<String>,
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
    DeadLetters(DeadLettersCommand),
    /// Delete processed rows older than the retention period (retention
    /// mode), in small batches.
    Cleanup(CleanupArgs),
    /// Configuration tools.
    #[command(subcommand)]
    Config(ConfigCommand),
    /// Measure drain throughput, commit-to-ack latency and producer cost
    /// against a reference on the same server.
    #[cfg(feature = "bench")]
    Bench(BenchArgs),
    /// Refuses: this build has no benchmarks (feature `bench`).
    #[cfg(not(feature = "bench"))]
    #[command(hide = true)]
    Bench {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        _args: Vec<String>,
    },
    /// Ask a running relay's /readyz whether it is ready: one line why,
    /// exit 0 or 1 (for exec probes and images without curl).
    Healthcheck(HealthcheckArgs),
    /// Serve the web console: overview, stuck aggregates, events, dead
    /// letters, pause / resume (docs/console.md).
    Console(crate::commands::console::ConsoleArgs),
}

impl Cli {
    /// What this command line asks of the configuration: `outbox relay`
    /// and `outbox config check` (which shows what `relay` would run with)
    /// take the relay's flags and log at `info` unless told otherwise;
    /// every other command logs at `warn`.
    pub fn config_request(&self) -> config::Request {
        let mut flags = self.global.flags();
        let (relay, path) = match &self.command {
            Command::Relay(args) => (Some(args), None),
            Command::Config(ConfigCommand::Check { path, relay }) => (Some(relay), path.clone()),
            _ => (None, None),
        };
        if let Some(args) = relay {
            args.flags(&mut flags);
        }
        config::Request {
            file: path.or_else(|| self.global.config.clone()),
            flags,
            default_log_level: if relay.is_some() { "info" } else { "warn" },
        }
    }
}

impl Global {
    /// The settings these flags give (absent flags set nothing).
    fn flags(&self) -> Flags {
        let mut l = Flags::default();
        l.set_str(
            "database_url",
            "--database-url",
            self.database_url.as_deref(),
        );
        // An explicit `--schema ''` is set, and refused by validation.
        if self.schema != SCHEMA_UNSET {
            l.set("schema", "--schema", self.schema.as_str());
        }
        l.set_str("log.level", "--log-level", self.log_level.as_deref());
        if self.log_json {
            l.set("log.format", "--log-json", config::LogFormat::Json.as_str());
        }
        l.set_str("log.format", "--log-format", self.log_format.as_deref());
        l
    }
}

impl Command {
    /// Runs this command with its configuration.
    pub async fn run(self, ctx: Ctx) -> Result<ExitCode> {
        let ctx = &ctx;
        match self {
            Command::Migrate(args) => commands::migrate::run(ctx, args).await,
            Command::Relay(args) => commands::relay::run(ctx, args).await,
            Command::Status(args) => commands::status::run(ctx, args).await,
            Command::Demo(args) => commands::demo::run(ctx, args).await,
            Command::DeadLetters(cmd) => commands::dead_letters::run(ctx, cmd).await,
            Command::Cleanup(args) => commands::cleanup::run(ctx, args).await,
            Command::Config(cmd) => commands::config::run(ctx, cmd).await,
            #[cfg(feature = "bench")]
            Command::Bench(args) => commands::bench::run(ctx, args).await,
            #[cfg(not(feature = "bench"))]
            Command::Bench { .. } => anyhow::bail!(
                "this outbox program is built without the benchmarks: build them with \
                 `cargo build --release -p outbox-cli --features bench` (a relay for \
                 production needs none)"
            ),
            Command::Healthcheck(args) => commands::healthcheck::run(ctx, args).await,
            Command::Console(args) => crate::commands::console::run(ctx, args).await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(args: &[&str]) -> config::Request {
        let argv = std::iter::once("outbox").chain(args.iter().copied());
        Cli::try_parse_from(argv).unwrap().config_request()
    }

    #[test]
    fn the_relay_logs_at_info_and_other_commands_at_warn() {
        assert_eq!(request(&["relay"]).default_log_level, "info");
        assert_eq!(request(&["config", "check"]).default_log_level, "info");
        assert_eq!(request(&["status"]).default_log_level, "warn");
        assert_eq!(request(&["migrate"]).default_log_level, "warn");
    }

    #[test]
    fn config_check_reads_its_own_path_before_the_global_one() {
        let r = request(&["--config", "/a.toml", "config", "check", "/b.toml"]);
        assert_eq!(r.file, Some(PathBuf::from("/b.toml")));
        let r = request(&["--config", "/a.toml", "status"]);
        assert_eq!(r.file, Some(PathBuf::from("/a.toml")));
    }
}
