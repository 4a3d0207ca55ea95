//! One module per subcommand.

pub mod bench;
pub mod cleanup;
pub mod config;
pub mod dead_letters;
mod demo;
mod migrate;
mod relay;
mod status;

use std::process::ExitCode;

use anyhow::Result;
use outbox::Schema;

use crate::cli::Command;

/// What every command is handed: the configuration loaded (and validated)
/// from the file, the environment and the flags, and its schema.
pub struct Ctx {
    /// The layered configuration, with the origin of every key.
    pub loaded: crate::config::Loaded,
    /// `schema`, checked.
    pub schema: Schema,
}

impl Ctx {
    /// The configuration's database URL, if any.
    pub fn database_url(&self) -> &Option<String> {
        &self.loaded.config.database_url
    }
}

/// Runs `command` with its configuration.
pub async fn run(command: Command, ctx: Ctx) -> Result<ExitCode> {
    let ctx = &ctx;
    match command {
        Command::Migrate(args) => migrate::run(ctx, args).await,
        Command::Relay(args) => relay::run(ctx, args).await,
        Command::Status(args) => status::run(ctx, args).await,
        Command::Demo(args) => demo::run(ctx, args).await,
        Command::DeadLetters(cmd) => dead_letters::run(ctx, cmd).await,
        Command::Cleanup(args) => cleanup::run(ctx, args).await,
        Command::Config(cmd) => config::run(ctx, cmd).await,
        Command::Bench(args) => bench::run(ctx, args).await,
        Command::Console(args) => crate::console::run(ctx, args).await,
    }
}
