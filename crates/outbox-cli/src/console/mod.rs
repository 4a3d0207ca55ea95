//! `outbox console`: a server-rendered web console for the people on call
//! (overview, stuck aggregates, events, dead letters, pause / resume). See
//! docs/console.md.

mod actions;
mod answer;
mod auth;
mod count;
mod forms;
mod json_pretty;
mod metrics;
mod pages;
mod queries;
mod rate;
mod selection;
mod server;
mod store;
mod throttle;

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{bail, Result};

use crate::ctx::Ctx;
use crate::db;

/// Flags of `outbox console`. The password comes from
/// `OUTBOX_CONSOLE_PASSWORD` or `--password-file`, never from a flag.
#[derive(Debug, clap::Args)]
pub struct ConsoleArgs {
    /// Address to serve on. Anything but a loopback address needs a
    /// password.
    #[arg(long, value_name = "HOST:PORT", default_value = "127.0.0.1:8080")]
    pub listen: String,
    /// File holding the password (its trailing newline ignored); wins over
    /// OUTBOX_CONSOLE_PASSWORD. Without either, the console serves loopback
    /// only and asks for no password.
    #[arg(long, value_name = "PATH")]
    pub password_file: Option<PathBuf>,
    /// Show everything, change nothing: no action buttons, every POST but
    /// sign-in and sign-out refused.
    #[arg(long)]
    pub read_only: bool,
    /// Link for an event's trace, `{trace_id}` replaced by the trace id of
    /// its `traceparent` header, e.g. http://jaeger:16686/trace/{trace_id}.
    #[arg(long, value_name = "URL")]
    pub trace_link: Option<String>,
}

pub async fn run(ctx: &Ctx, args: ConsoleArgs) -> Result<ExitCode> {
    let password = auth::password(
        args.password_file.as_deref(),
        "--password-file",
        std::env::var(auth::PASSWORD_ENV).ok(),
    )?;
    auth::check_exposure(&args.listen, password.is_some())?;
    if let Some(t) = &args.trace_link {
        if !(t.starts_with("https://") || t.starts_with("http://")) || !t.contains("{trace_id}") {
            bail!("--trace-link must be an http(s) URL holding {{trace_id}}");
        }
    }
    let url = db::require_url(ctx.database_url())?;
    let pool = db::connect(&url, 4).await?;
    {
        let mut conn = pool.acquire().await?;
        outbox::ensure_migrated(&mut conn, &ctx.schema).await?;
    }
    let listener = crate::listen::bind(&args.listen).await?;
    let shown = listener
        .local_addr()
        .map(|a| a.to_string())
        .unwrap_or(args.listen.clone());
    let app = app(pool, &ctx.schema, password, args.read_only, args.trace_link);
    tracing::info!(listen = %shown, read_only = args.read_only, "console serving");
    eprintln!("console: serving http://{shown}/");
    tokio::select! {
        () = server::serve(listener, app) => {}
        _ = tokio::signal::ctrl_c() => {}
        () = terminated() => {}
    }
    Ok(ExitCode::SUCCESS)
}

pub(crate) use answer::App as ConsoleApp;

/// The console mounted on the relay's endpoints (`outbox relay --console`).
#[async_trait::async_trait]
impl crate::http::Mounted for ConsoleApp {
    async fn answer(
        &self,
        req: hyper::Request<hyper::body::Incoming>,
        peer: std::net::SocketAddr,
    ) -> answer::Answer {
        server::answer_request(self, req, peer).await
    }

    fn metrics(&self) -> String {
        self.metrics.encode()
    }
}

/// The console of `schema` over `pool`: what `outbox console`, the relay's
/// `--console` and `bench console` serve.
pub(crate) fn app(
    pool: sqlx::PgPool,
    schema: &outbox::Schema,
    password: Option<String>,
    read_only: bool,
    trace_link: Option<String>,
) -> Arc<ConsoleApp> {
    Arc::new(answer::App {
        store: store::Store::new(pool, schema),
        sessions: auth::Sessions::default(),
        password,
        read_only,
        schema: schema.name().to_owned(),
        channel: schema.channel(),
        trace_link,
        metrics: metrics::ConsoleMetrics::default(),
        throttle: Default::default(),
        tally: Default::default(),
    })
}

/// The console's password for `outbox relay --console`, as `outbox
/// console` takes it (`--console-password-file` or
/// `OUTBOX_CONSOLE_PASSWORD`), and the refusal to serve `listen` off
/// loopback without one.
pub(crate) fn relay_password(
    file: Option<&std::path::Path>,
    listen: &str,
) -> Result<Option<String>> {
    let password = auth::password(
        file,
        "--console-password-file",
        std::env::var(auth::PASSWORD_ENV).ok(),
    )?;
    auth::check_exposure(listen, password.is_some())?;
    Ok(password)
}

/// Serves the console of `schema` over `pool` on `listen` (loopback, no
/// password, read-write) on a task of its own, for `bench console`; the
/// address it serves on.
#[cfg(feature = "bench")]
pub(crate) async fn spawn_loopback(
    pool: sqlx::PgPool,
    schema: &outbox::Schema,
    listen: &str,
) -> Result<std::net::SocketAddr> {
    auth::check_exposure(listen, false)?;
    let listener = crate::listen::bind(listen).await?;
    let addr = listener.local_addr()?;
    let app = app(pool, schema, None, false, None);
    tokio::spawn(server::serve(listener, app));
    Ok(addr)
}

async fn terminated() {
    match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(mut s) => {
            s.recv().await;
        }
        Err(_) => std::future::pending().await,
    }
}
