//! `outbox dead-letters` (being written).

use std::process::ExitCode;

use anyhow::{bail, Result};
use outbox::Schema;

use crate::cli::Global;

#[derive(Debug, clap::Subcommand)]
pub enum DeadLettersCommand {
    /// (being written)
    Todo,
}

pub async fn run(_global: &Global, _schema: &Schema, _cmd: DeadLettersCommand) -> Result<ExitCode> {
    bail!("not implemented yet")
}
