//! `outbox relay`: the daemon. Publishes until SIGTERM/SIGINT (or, with
//! `--drain`, until nothing is pending), then stops gracefully: no new
//! claims, the in-flight batch is published and acknowledged, partitions
//! are released for other instances at once.

use std::process::ExitCode;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use outbox::{Relay, RelayHandle, Schema, Status};
use sqlx::PgPool;
use tokio::sync::watch;
use tokio::task::JoinHandle;

mod args;
mod sources;
mod stop;

pub use args::RelayArgs;
use stop::{Signals, StopReason};

use crate::config::Loaded;
use crate::ctx::Ctx;
use crate::db_probe::{self, DbProbe};
use crate::http::{self, Readiness, Ready, RelayState};
use crate::metrics::{self, Metrics};
use crate::progress::Progress;
use crate::telemetry::Export;
use crate::{db, publisher};

/// How often the loop checks whether the relay stopped by itself: an idle
/// relay's own wake-ups.
const TICK: Duration = Duration::from_secs(1);
/// How often it checks, with `--drain`, the backlog (and shows progress).
const DRAIN_TICK: Duration = Duration::from_millis(100);

/// Extra time past `shutdown_timeout_secs` before the process exits no
/// matter what (a publisher stuck in a system call cannot be cancelled).
const HARD_EXIT_GRACE: Duration = Duration::from_secs(2);

pub async fn run(ctx: &Ctx, args: RelayArgs) -> Result<ExitCode> {
    let schema = &ctx.schema;
    // Flags were folded into the loaded configuration with the file and
    // the environment.
    let loaded = &ctx.loaded;
    let c = &loaded.config;
    if !c.source.is_empty() {
        let plan = sources::SourcesPlan::from_config(c)?;
        return sources::run(ctx, &args, plan).await;
    }
    let mut signals = Signals::install(args.exit_with_parent)?;
    let url = db::require_url(&c.database_url)?;
    let console_password = match (&c.http.addr, args.console) {
        (Some(addr), true) => Some(crate::commands::console::relay_password(
            args.console_password_file.as_deref(),
            addr,
        )?),
        (None, true) => bail!("--console serves on the --http-addr server: set --http-addr too"),
        (_, false) => None,
    };
    let listener = http_listener(loaded).await?;
    let publisher = publisher::from_config(&c.publisher.spec, &c.publisher.tables, c.envelope()?)?;
    tracing::debug!(database = %db::redact_text(&url), "connecting");
    // Worker, leases, wake-up listener, claim-ahead, and the cleaner.
    let pool = db::connect(&url, 6).await?;
    crate::session_check::require_sessions(&pool).await?;
    // The metrics refresher and the readiness probe use connections of
    // their own, opened before the relay starts so a failure leaves nothing
    // half-started.
    let metrics = Arc::new(Metrics::new());
    // The one source is named after its schema.
    let source = metrics.source(schema.name());
    let side = match &listener {
        Some(_) => Some((
            db::connect(&url, 2).await?,
            DbProbe::new(
                &url,
                schema.clone(),
                source.clone(),
                Duration::from_millis(c.http.check_timeout_ms),
            )?,
        )),
        None => None,
    };
    let export = Export::start(&c.tracing)?;
    let mut builder = Relay::builder(pool.clone(), publisher.clone())
        .schema(schema.clone())
        .config(c.relay.clone());
    // Used only when the schema is in the WAL mode: the slot is read over a
    // replication connection to the same server.
    if let Ok(target) = outbox::ReplicationTarget::from_url(&url) {
        builder = builder.replication(target);
    }
    if listener.is_some() {
        builder = builder.observer(Arc::new(source.clone()));
    }
    #[cfg(feature = "opentelemetry")]
    if let Some(export) = &export {
        builder = builder.tracer(export.tracer());
    }
    let relay = builder.spawn().await?;
    metrics.set_relay_info(metrics::RelayInfo {
        version: env!("CARGO_PKG_VERSION").to_owned(),
        instance_id: relay.instance_id().to_owned(),
        schema: schema.name().to_owned(),
        publisher: publisher.name().to_owned(),
    });
    // Retention mode keeps processed rows: the cleaner removes expired ones.
    let cleaner = if c.relay.retention == outbox::Retention::Keep {
        Some(outbox::Cleaner::spawn(
            pool.clone(),
            schema.clone(),
            c.cleaner.clone(),
        )?)
    } else {
        None
    };
    let state = Arc::new(RelayState::default());
    state.running.store(true, Ordering::Relaxed);

    // The console reads on connections of its own, never the relay's.
    let console = match console_password {
        Some(password) => {
            let console_pool = db::connect(&url, 2).await?;
            Some(crate::commands::console::app(
                console_pool,
                schema,
                password,
                false,
                None,
            ))
        }
        None => None,
    };

    let (stop, stopped) = watch::channel(false);
    let mut background: Vec<JoinHandle<()>> = Vec::new();
    if let (Some(listener), Some((side, probe))) = (listener, side) {
        background.push(tokio::spawn(db_probe::refresh_loop(
            source.clone(),
            probe.clone(),
            side,
            schema.clone(),
            Duration::from_millis(c.http.refresh_ms),
            stopped,
        )));
        let addr = crate::listen::local_addr(&listener);
        let app = http::App {
            metrics: metrics.clone(),
            readiness: Ready::One(Readiness {
                db: probe,
                publisher: publisher.clone(),
                state: state.clone(),
                metrics: source.clone(),
                timeout: Duration::from_millis(c.http.check_timeout_ms),
            }),
            instance: relay.instance_id().to_owned(),
            started: Instant::now(),
            console: console.clone().map(|c| c as Arc<dyn http::Mounted>),
        };
        background.push(http::serve(listener, Arc::new(app)));
        if let Some(addr) = addr {
            if console.is_some() {
                tracing::info!(%addr, "serving /metrics, /healthz, /readyz and the console");
            } else {
                tracing::info!(%addr, "serving /metrics, /healthz and /readyz");
            }
        }
    }
    tracing::info!(
        instance = relay.instance_id(),
        publisher = publisher.name(),
        drain = c.drain,
        "relay running"
    );

    let reason = watch_relay(&relay, &pool, schema, loaded, &mut signals).await;
    state.stopping.store(true, Ordering::Relaxed);
    let deadline = Duration::from_secs(c.shutdown_timeout_secs);
    tracing::info!(
        %reason,
        timeout_secs = c.shutdown_timeout_secs,
        "relay stopping: finishing the in-flight batch and releasing partitions"
    );
    exit_after(deadline + HARD_EXIT_GRACE, c.shutdown_timeout_secs);
    let result = tokio::select! {
        r = relay.shutdown_within(deadline) => r,
        again = signals.next() => {
            eprintln!("error: {again} during shutdown: stopped at once; the in-flight batch will be delivered again");
            std::process::exit(1);
        }
    };
    let _ = stop.send(true);
    for task in &background {
        task.abort();
    }
    if let Some(cleaner) = cleaner {
        match cleaner.shutdown().await {
            Ok(totals) => tracing::info!(
                events_deleted = totals.events_deleted,
                inbox_deleted = totals.inbox_deleted,
                "cleaner stopped"
            ),
            Err(e) => tracing::warn!(error = %e, "cleaner failed while stopping"),
        }
    }
    if let Some(export) = export {
        export.shutdown().await;
    }
    let stats = match result {
        Ok(stats) => stats,
        Err(outbox::Error::ShutdownTimeout(_)) => {
            // A publisher stuck in a system call would also hold up the
            // runtime's own shutdown: leave now.
            eprintln!(
                "error: {} ({})",
                deadline_message(c.shutdown_timeout_secs),
                loaded.origin("shutdown_timeout_secs").describe()
            );
            std::process::exit(1);
        }
        Err(e) => return Err(e).context("the relay failed while stopping"),
    };
    tracing::info!(
        %reason,
        delivered = stats.delivered,
        retried = stats.retried,
        dead_lettered = stats.dead_lettered,
        "relay stopped"
    );
    if reason == StopReason::RelayStopped {
        bail!("the relay stopped on its own; see the log above");
    }
    if c.drain {
        eprintln!(
            "relay: {reason}; delivered {} events, {} retried, {} dead-lettered",
            stats.delivered, stats.retried, stats.dead_lettered
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// The `/metrics`, `/healthz` and `/readyz` server's socket, if
/// `http.addr` is set; an error names the key and where it was set.
async fn http_listener(loaded: &Loaded) -> Result<Option<tokio::net::TcpListener>> {
    match &loaded.config.http.addr {
        Some(addr) => Ok(Some(crate::listen::bind(addr).await.with_context(
            || format!("http.addr ({})", loaded.origin("http.addr").describe()),
        )?)),
        None => Ok(None),
    }
}

/// Runs until a signal, the end of the backlog (`--drain`) or the relay's
/// own stop; returns why.
async fn watch_relay(
    relay: &RelayHandle,
    pool: &PgPool,
    schema: &Schema,
    loaded: &Loaded,
    signals: &mut Signals,
) -> StopReason {
    let drain = loaded.config.drain;
    // In the WAL mode, drained also means the slot is read past everything
    // written before the drain began (events may wait in it, behind WAL
    // that is not theirs).
    let mut wal_end = None;
    if drain {
        match wal_position(pool).await {
            Ok(lsn) => wal_end = Some(lsn),
            Err(e) => tracing::warn!(error = %format!("{e:#}"), "drain check failed"),
        }
    }
    let mut progress = Progress::stderr("relay", drain);
    let mut tick = tokio::time::interval(if drain { DRAIN_TICK } else { TICK });
    let reason = loop {
        tokio::select! {
            sig = signals.next() => break sig,
            _ = tick.tick() => {
                if relay.is_finished() {
                    break StopReason::RelayStopped;
                }
                if !drain {
                    continue;
                }
                let Some(lsn) = &wal_end else {
                    match wal_position(pool).await {
                        Ok(lsn) => wal_end = Some(lsn),
                        Err(e) => tracing::warn!(error = %format!("{e:#}"), "drain check failed"),
                    }
                    continue;
                };
                match pending(pool, schema, lsn).await {
                    Ok(0) => break StopReason::Drained,
                    Ok(n) => progress.update(relay.stats().delivered, Some(n as u64)),
                    Err(e) => tracing::warn!(error = %format!("{e:#}"), "drain check failed"),
                }
            }
        }
    };
    progress.finish();
    reason
}

/// Events left to deliver: in the table, plus one while the schema's
/// slot is not yet confirmed to `wal_end` (how many wait in it is not
/// known until they are read).
async fn pending(pool: &PgPool, schema: &Schema, wal_end: &str) -> Result<i64> {
    let mut conn = pool.acquire().await?;
    let in_table = Status::pending(&mut conn, schema).await?;
    let slot_read = Status::slot_confirmed_to(&mut conn, schema, wal_end).await?;
    Ok(in_table + i64::from(!slot_read))
}

async fn wal_position(pool: &PgPool) -> Result<String> {
    let mut conn = pool.acquire().await?;
    Ok(Status::wal_end(&mut conn).await?)
}

/// Ends the process with status 1 after `after`, whatever is still running:
/// the last resort behind the graceful deadline.
fn exit_after(after: Duration, timeout_secs: u64) {
    std::thread::spawn(move || {
        std::thread::sleep(after);
        eprintln!("error: {}", deadline_message(timeout_secs));
        std::process::exit(1);
    });
}

fn deadline_message(timeout_secs: u64) -> String {
    format!(
        "the relay did not stop within shutdown_timeout_secs = {timeout_secs}; exiting without acknowledging the in-flight batch (it will be delivered again; its partitions move when their leases end)"
    )
}
