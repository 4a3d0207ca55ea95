//! `outbox relay`: the daemon.

use std::process::ExitCode;
use std::time::Duration;

use anyhow::Result;
use outbox::{Relay, RelayConfig, Retention, Schema, Status};
use tokio::signal::unix::{signal, SignalKind};

use crate::cli::{Global, RelayArgs};
use crate::{db, publisher};

pub fn config_from(args: &RelayArgs) -> RelayConfig {
    let mut config = RelayConfig::default();
    if let Some(v) = &args.instance_id {
        config.instance_id = Some(v.clone());
    }
    if let Some(v) = args.batch_size {
        config.batch_size = v;
    }
    if let Some(v) = args.max_attempts {
        config.max_attempts = v;
    }
    if let Some(v) = args.lease_ms {
        config.lease_ms = v;
    }
    if let Some(v) = args.poll_max_ms {
        config.poll_max_ms = v;
    }
    if let Some(v) = args.backoff_base_ms {
        config.backoff_base_ms = v;
    }
    if args.keep_processed {
        config.retention = Retention::Keep;
    }
    config
}

pub async fn run(global: &Global, schema: &Schema, args: RelayArgs) -> Result<ExitCode> {
    let config = config_from(&args);
    config.validate()?;
    let url = db::require_url(&global.database_url)?;
    let publisher = publisher::from_spec(&args.publisher)?;
    let pool = db::connect(&url, 5).await?;
    let relay = Relay::builder(pool.clone(), publisher)
        .schema(schema.clone())
        .config(config)
        .spawn()
        .await?;
    tracing::info!(instance = relay.instance_id(), "relay running");

    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    let reason = loop {
        tokio::select! {
            _ = term.recv() => break "SIGTERM",
            _ = int.recv() => break "SIGINT",
            _ = tick.tick() => {
                if relay.is_finished() {
                    break "relay stopped";
                }
                if args.drain {
                    let mut conn = match pool.acquire().await {
                        Ok(c) => c,
                        Err(e) => { tracing::warn!(error = %e, "drain check failed"); continue; }
                    };
                    match Status::pending(&mut conn, schema).await {
                        Ok(0) => break "drained",
                        Ok(_) => {}
                        Err(e) => tracing::warn!(error = %e, "drain check failed"),
                    }
                }
            }
        }
    };
    tracing::info!(reason, "relay shutting down");
    let stats = relay
        .shutdown_within(Duration::from_secs(args.shutdown_timeout_secs))
        .await?;
    if args.drain {
        eprintln!(
            "relay: {reason}; delivered {} events, {} retried, {} dead-lettered",
            stats.delivered, stats.retried, stats.dead_lettered
        );
    }
    Ok(ExitCode::SUCCESS)
}
