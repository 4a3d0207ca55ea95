//! One module per subcommand.

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
    }
}
