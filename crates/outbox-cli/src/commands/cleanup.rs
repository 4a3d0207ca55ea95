//! `outbox cleanup` (being written).

use std::process::ExitCode;

use anyhow::{bail, Result};
use outbox::Schema;

use crate::cli::Global;

#[derive(Debug, clap::Args)]
pub struct CleanupArgs {}

pub async fn run(_global: &Global, _schema: &Schema, _args: CleanupArgs) -> Result<ExitCode> {
    bail!("not implemented yet")
}
