//! `outbox`, the program of the PostgreSQL outbox: its commands (`migrate`,
//! `relay`, `status`, `dead-letters`, `cleanup`, `config`, `healthcheck`,
//! `console`, `demo`) in `commands/`, and the relay daemon's runtime
//! beside them in `daemon/` (the HTTP server, metrics, probes, telemetry). The web console is crate
//! `outbox-console`, which `console` and `relay --console` serve.
//! `outbox bench` (feature `bench`) runs the benchmarks of crate
//! `outbox-bench`.
#![forbid(unsafe_code)]

mod cli;
mod commands;
mod config;
mod ctx;
mod daemon;
mod db;
mod progress;
mod small_file;
mod text;

use std::io::IsTerminal;
use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = cli::Cli::parse();
    // Logging is configured like everything else (file < env < flags), so
    // the configuration is loaded first; its errors are printed plainly.
    let loaded = match config::load(cli.config_request()).and_then(|l| init_logging(&l).map(|()| l))
    {
        Ok(loaded) => loaded,
        Err(e) => {
            eprintln!("error: {}", db::redact_text(&text::error_chain(&e)));
            return ExitCode::FAILURE;
        }
    };
    tracing::debug!(config = %config::redacted_json(&loaded), "configuration loaded");
    let schema = match outbox::Schema::new(&loaded.config.schema) {
        Ok(schema) => schema,
        Err(e) => {
            eprintln!("error: {}", db::redact_text(&format!("{e:#}")));
            return ExitCode::FAILURE;
        }
    };
    let ctx = ctx::Ctx { loaded, schema };

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
    match runtime.block_on(cli.command.run(ctx)) {
        Ok(code) => code,
        Err(e) => {
            // One line: the error and its causes, passwords redacted.
            eprintln!("error: {}", db::redact_text(&text::error_chain(&e)));
            ExitCode::FAILURE
        }
    }
}

/// Text or JSON log lines on stderr, filtered by `--log-level`, `RUST_LOG`
/// or `log.level`.
fn init_logging(loaded: &config::Loaded) -> anyhow::Result<()> {
    let filter = config::log_filter(loaded)?;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr);
    match loaded.config.log.format {
        config::LogFormat::Json => builder.json().init(),
        config::LogFormat::Text => builder.fmt_fields(text_fields()).init(),
    }
    Ok(())
}

/// The fields of a text log line as the default format writes them
/// (`message name=value …`), with every control character escaped, whoever
/// wrote the value (a flag, a producer's aggregate id, a broker's error): a
/// line break or an escape sequence in a value cannot forge or colour a
/// line. (JSON lines escape them already.)
fn text_fields() -> impl for<'w> tracing_subscriber::fmt::FormatFields<'w> {
    use std::fmt::Write;
    use tracing_subscriber::field::MakeExt;

    tracing_subscriber::fmt::format::debug_fn(|w, field, value| {
        let mut w = text::EscapeControls(w);
        match field.name() {
            "message" => write!(w, "{value:?}"),
            // Metadata of records from the `log` crate, as the default
            // format leaves them out.
            name if name.starts_with("log.") => Ok(()),
            name => write!(w, "{}={value:?}", name.trim_start_matches("r#")),
        }
    })
    .delimited(" ")
}
