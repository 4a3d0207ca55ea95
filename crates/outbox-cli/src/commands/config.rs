//! `outbox config` (being written).

use std::process::ExitCode;

use anyhow::{bail, Result};

use crate::cli::Global;

#[derive(Debug, clap::Subcommand)]
pub enum ConfigCommand {
    /// (being written)
    Todo,
}

pub async fn run(_global: &Global, _cmd: ConfigCommand) -> Result<ExitCode> {
    bail!("not implemented yet")
}
