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

use crate::cli::{Cli, Command};

pub async fn run(cli: Cli) -> Result<ExitCode> {
    let schema = Schema::new(&cli.global.schema)?;
    match cli.command {
        Command::Migrate(args) => migrate::run(&cli.global, &schema, args).await,
        Command::Relay(args) => relay::run(&cli.global, &schema, args).await,
        Command::Status(args) => status::run(&cli.global, &schema, args).await,
        Command::Demo(args) => demo::run(&cli.global, &schema, args).await,
        Command::DeadLetters(cmd) => dead_letters::run(&cli.global, &schema, cmd).await,
        Command::Cleanup(args) => cleanup::run(&cli.global, &schema, args).await,
        Command::Config(cmd) => config::run(&cli.global, cmd).await,
        Command::Bench(args) => bench::run(&cli.global, &schema, args).await,
    }
}
