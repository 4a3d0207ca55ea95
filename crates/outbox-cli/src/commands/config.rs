//! `outbox config check [PATH]`: validates the configuration without
//! connecting anywhere and prints the effective settings, passwords
//! redacted.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;

use crate::commands::relay::RelayArgs;
use crate::config;
use crate::ctx::Ctx;

#[derive(Debug, clap::Subcommand)]
pub enum ConfigCommand {
    /// Validate the config file, environment and flags without connecting,
    /// then print the configuration `outbox relay` would run with
    /// (passwords redacted), each value with where it came from. Takes the
    /// same flags as `outbox relay`. Exits 1 with the first problem.
    Check {
        /// The config file (default: --config / OUTBOX_CONFIG).
        path: Option<PathBuf>,
        #[command(flatten)]
        relay: RelayArgs,
    },
}

pub async fn run(ctx: &Ctx, cmd: ConfigCommand) -> Result<ExitCode> {
    // The configuration was loaded and validated before the command ran;
    // a problem would have stopped the program with its message already.
    match cmd {
        ConfigCommand::Check { .. } => {
            print!("{}", config::render(&ctx.loaded));
            eprintln!("configuration OK");
            Ok(ExitCode::SUCCESS)
        }
    }
}
