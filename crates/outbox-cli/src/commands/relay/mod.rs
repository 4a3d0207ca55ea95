//! `outbox relay`: the daemon. Publishes until SIGTERM/SIGINT (or, with
//! `--drain`, until nothing is pending), then stops gracefully: no new
//! claims, the in-flight batches are published and acknowledged,
//! partitions are released for other instances at once.
//!
//! One lifecycle for either assembly ([`running`]): a relay of one source
//! (`database_url` and `schema`, [`one`]) or of many (`[[source]]`
//! entries, [`sources`]). Signals, the HTTP server (`/metrics`, `/healthz`,
//! `/readyz`, the console), span export, the cleaner, the watch, the
//! deadline and the summary are the same for both.

use std::process::ExitCode;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, Result};
use outbox::CleanerHandle;
use tokio::sync::watch;
use tokio::task::JoinHandle;

mod args;
mod console;
mod one;
mod running;
mod shutdown;
mod sources;
mod stop;
mod wiring;

pub use args::RelayArgs;
use running::{Plan, Running};
use stop::Signals;
use wiring::Around;

use crate::config::Loaded;
use crate::ctx::Ctx;
use crate::daemon::http::{self, Mounted, RelayState};
use crate::daemon::metrics::Metrics;
use crate::daemon::telemetry::Export;

pub async fn run(ctx: &Ctx, args: RelayArgs) -> Result<ExitCode> {
    // Flags were folded into the loaded configuration with the file and
    // the environment.
    let plan = Plan::from_config(ctx)?;
    let mut signals = Signals::install(args.exit_with_parent)?;
    let mut daemon = start(ctx, &args, plan).await?;
    let drain = ctx.loaded.config.drain;
    let watched = stop::watch(&mut daemon.running, drain, &mut signals).await;
    shutdown::stop(ctx, daemon, watched, &mut signals).await
}

/// A relay running, with what runs around it until it stops.
struct Daemon {
    running: Running,
    /// Running or stopping, for `/readyz`.
    state: Arc<RelayState>,
    /// Tells the tasks beside the relay that it stopped.
    stop: watch::Sender<bool>,
    /// The HTTP server and the tasks beside the relay.
    background: Vec<JoinHandle<()>>,
    cleaner: Option<CleanerHandle>,
    export: Option<Export>,
}

/// Everything up to "running": the console chosen and the HTTP socket
/// bound before anything connects, the databases and publishers opened
/// and the console mounted before the relay starts (a failure leaves
/// nothing half-started), then the relay, its cleaner and its server.
async fn start(ctx: &Ctx, args: &RelayArgs, plan: Plan) -> Result<Daemon> {
    let c = &ctx.loaded.config;
    let console = console::choose(ctx, args, &plan).await?;
    let listener = http_listener(&ctx.loaded).await?;
    let metrics = Arc::new(Metrics::new());
    let prepared = plan.connect(ctx, &metrics, listener.is_some()).await?;
    let console = match console {
        Some(choice) => Some(choice.mount().await?),
        None => None,
    };
    let export = Export::start(&c.tracing)?;
    let state = Arc::new(RelayState::default());
    let (stop, stopped) = watch::channel(false);
    let around = Around {
        metrics: &metrics,
        state: &state,
        export: export.as_ref(),
        stopped,
    };
    let started = prepared.spawn(ctx, around).await?;
    metrics.set_relay_info(started.info);
    let running = started.running;
    let cleaner = running.cleaner(&c.cleaner)?;
    state.running.store(true, Ordering::Relaxed);
    let mut background = started.background;
    if let (Some(listener), Some(readiness)) = (listener, started.readiness) {
        let app = http::App {
            metrics,
            readiness,
            instance: running.instance_id().to_owned(),
            started: Instant::now(),
            console: None,
        };
        background.push(serve(listener, app, console));
    }
    running.log_running(c.drain);
    Ok(Daemon {
        running,
        state,
        stop,
        background,
        cleaner,
        export,
    })
}

/// Serves `/metrics`, `/healthz`, `/readyz` and, when mounted, the console
/// (with what it shows) on `listener`.
fn serve(
    listener: tokio::net::TcpListener,
    mut app: http::App,
    console: Option<(Arc<dyn Mounted>, String)>,
) -> JoinHandle<()> {
    let addr = crate::daemon::listen::local_addr(&listener);
    let shown = console.as_ref().map(|(_, shown)| shown.clone());
    app.console = console.map(|(mounted, _)| mounted);
    let task = http::serve(listener, Arc::new(app));
    match (addr, shown) {
        (Some(addr), Some(console)) => tracing::info!(
            %addr,
            %console,
            "serving /metrics, /healthz, /readyz and the console"
        ),
        (Some(addr), None) => tracing::info!(%addr, "serving /metrics, /healthz and /readyz"),
        (None, _) => {}
    }
    task
}

/// The `/metrics`, `/healthz` and `/readyz` server's socket, if
/// `http.addr` is set; an error names the key and where it was set.
async fn http_listener(loaded: &Loaded) -> Result<Option<tokio::net::TcpListener>> {
    match &loaded.config.http.addr {
        Some(addr) => Ok(Some(crate::daemon::listen::bind(addr).await.with_context(
            || format!("http.addr ({})", loaded.origin("http.addr").describe()),
        )?)),
        None => Ok(None),
    }
}
