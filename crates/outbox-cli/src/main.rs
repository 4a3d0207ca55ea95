//! `outbox`: migrate, relay, status and demo for the PostgreSQL outbox.
#![forbid(unsafe_code)]

mod cli;
mod commands;
mod db;
mod publisher;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = cli::Cli::parse();
    init_logging(&cli.global);
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(commands::run(cli)) {
        Ok(code) => code,
        Err(e) => {
            // One line: the error and its causes, passwords redacted.
            eprintln!("error: {}", db::redact_text(&format!("{e:#}")));
            ExitCode::FAILURE
        }
    }
}

fn init_logging(global: &cli::Global) {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new(global.log_level.as_deref().unwrap_or("warn")));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    if global.log_json {
        builder.json().init();
    } else {
        builder.init();
    }
}
