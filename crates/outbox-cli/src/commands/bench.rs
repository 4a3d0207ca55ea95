//! `outbox bench` (being written).

use std::process::ExitCode;

use anyhow::{bail, Result};
use outbox::Schema;

use crate::cli::Global;

#[derive(Debug, clap::Args)]
pub struct BenchArgs {}

pub async fn run(_global: &Global, _schema: &Schema, _args: BenchArgs) -> Result<ExitCode> {
    bail!("not implemented yet")
}
