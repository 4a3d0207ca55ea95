//! `outbox console`: the web console of crate `outbox-console` (docs/
//! console.md) on a server of its own, its password taken as the CLI
//! takes secrets (environment or file, never a flag); and the same console
//! for `outbox relay --console` and `bench console`.

use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use outbox_console::{is_mapped_loopback, Console};
use tokio::net::TcpListener;

use crate::ctx::Ctx;
use crate::db;

/// Environment variable holding the console's password.
pub const PASSWORD_ENV: &str = "OUTBOX_CONSOLE_PASSWORD";

/// The largest password file read: far more than any password, so that a
/// wrong path (a log, a device) fails at once.
pub const MAX_PASSWORD_FILE_BYTES: u64 = 4096;

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
    let password = password(
        args.password_file.as_deref(),
        "--password-file",
        std::env::var(PASSWORD_ENV).ok(),
    )?;
    check_exposure(&args.listen, password.is_some())?;
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
    let listener = crate::daemon::listen::bind(&args.listen).await?;
    let shown = listener
        .local_addr()
        .map(|a| a.to_string())
        .unwrap_or(args.listen.clone());
    let console = app(pool, &ctx.schema, password, args.read_only, args.trace_link);
    tracing::info!(listen = %shown, read_only = args.read_only, "console serving");
    eprintln!("console: serving http://{shown}/");
    tokio::select! {
        () = serve(listener, console) => {}
        _ = tokio::signal::ctrl_c() => {}
        () = terminated() => {}
    }
    Ok(ExitCode::SUCCESS)
}

/// The console mounted on the relay's endpoints (`outbox relay --console`).
#[async_trait::async_trait]
impl crate::daemon::http::Mounted for Console {
    async fn answer(
        &self,
        req: hyper::Request<hyper::body::Incoming>,
        peer: SocketAddr,
    ) -> outbox_console::Response {
        self.handle(req, peer).await
    }

    fn metrics(&self) -> String {
        Console::metrics(self)
    }
}

/// The console of `schema` over `pool`, at the root of its server: what
/// `outbox console`, the relay's `--console` and `bench console` serve.
/// `password` is one [`password`] read (never empty) and `trace_link` one
/// [`run`] checked.
pub(crate) fn app(
    pool: sqlx::PgPool,
    schema: &outbox::Schema,
    password: Option<String>,
    read_only: bool,
    trace_link: Option<String>,
) -> Arc<Console> {
    let mut builder = Console::builder(pool, schema).read_only(read_only);
    if let Some(p) = password {
        builder = builder.password(p);
    }
    if let Some(t) = trace_link {
        builder = builder.trace_link(t);
    }
    // Only an empty password or a malformed trace link is refused, and
    // both were refused with the flag's name before.
    Arc::new(
        builder
            .build()
            .expect("the console's settings were checked with their flags"),
    )
}

/// Serves `console` on `listener` until the task ends, through the relay's
/// accept loop and its limits (connections, header timeout), so idle and
/// slow clients lock `outbox console` out no more than the relay.
async fn serve(listener: TcpListener, console: Arc<Console>) {
    crate::daemon::http::accept_loop(listener, move |req, peer| {
        let console = console.clone();
        async move { console.handle(req, peer).await }
    })
    .await
}

/// The console's password for `outbox relay --console`, as `outbox
/// console` takes it (`--console-password-file` or
/// `OUTBOX_CONSOLE_PASSWORD`), and the refusal to serve `listen` off
/// loopback without one.
pub(crate) fn relay_password(
    file: Option<&std::path::Path>,
    listen: &str,
) -> Result<Option<String>> {
    let password = password(
        file,
        "--console-password-file",
        std::env::var(PASSWORD_ENV).ok(),
    )?;
    check_exposure(listen, password.is_some())?;
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
) -> Result<SocketAddr> {
    check_exposure(listen, false)?;
    let listener = crate::daemon::listen::bind(listen).await?;
    let addr = listener.local_addr()?;
    let console = app(pool, schema, None, false, None);
    tokio::spawn(serve(listener, console));
    Ok(addr)
}

/// The password, if one is configured: the file `flag` names (a regular
/// file of at most [`MAX_PASSWORD_FILE_BYTES`], read as
/// [`crate::small_file`] reads) wins over `OUTBOX_CONSOLE_PASSWORD`. A
/// file's trailing newline is not part of it.
pub fn password(
    file: Option<&std::path::Path>,
    flag: &str,
    env: Option<String>,
) -> Result<Option<String>> {
    let password = match file {
        Some(path) => {
            let fix = format!("give {flag} the path of a file holding only the password");
            let bytes = crate::small_file::SmallFile {
                what: "password file",
                max_bytes: MAX_PASSWORD_FILE_BYTES,
                fix: &fix,
            }
            .read(path)?;
            let text = String::from_utf8(bytes).map_err(|_| {
                anyhow::anyhow!(
                    "password file {} is not UTF-8 text: {fix}",
                    crate::text::cut(&path.display().to_string())
                )
            })?;
            Some(text.trim_end_matches(['\n', '\r']).to_owned())
        }
        None => env,
    };
    match password {
        Some(p) if p.is_empty() => bail!("the console password is empty: set a non-empty one"),
        p => Ok(p),
    }
}

/// Whether every address `listen` names is a loopback address.
pub fn is_loopback(listen: &str) -> Result<bool> {
    let addrs: Vec<SocketAddr> = listen
        .to_socket_addrs()
        .with_context(|| format!("--listen {listen:?} is not HOST:PORT"))?
        .collect();
    Ok(!addrs.is_empty()
        && addrs
            .iter()
            .all(|a| a.ip().is_loopback() || is_mapped_loopback(a.ip())))
}

/// Refuses to serve a non-loopback address without a password.
pub fn check_exposure(listen: &str, has_password: bool) -> Result<()> {
    if !has_password && !is_loopback(listen)? {
        bail!(
            "--listen {listen} is reachable from other machines: set a password in \
             {PASSWORD_ENV} or --password-file, or listen on 127.0.0.1"
        );
    }
    Ok(())
}

async fn terminated() {
    match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(mut s) => {
            s.recv().await;
        }
        Err(_) => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_ipv4_mapped_loopback_address_is_loopback_too() {
        assert!(is_loopback("[::ffff:127.0.0.1]:8080").unwrap());
        assert!(check_exposure("[::ffff:127.0.0.1]:8080", false).is_ok());
        assert!(!is_loopback("[::ffff:10.0.0.1]:8080").unwrap());
    }

    #[test]
    fn only_loopback_listens_without_a_password() {
        assert!(check_exposure("127.0.0.1:0", false).is_ok());
        assert!(check_exposure("[::1]:0", false).is_ok());
        let err = check_exposure("0.0.0.0:0", false).unwrap_err().to_string();
        assert!(err.contains(PASSWORD_ENV), "{err}");
        assert!(check_exposure("0.0.0.0:0", true).is_ok());
    }

    #[test]
    fn an_empty_password_is_refused_and_a_file_loses_its_newline() {
        assert!(password(None, "--password-file", Some(String::new())).is_err());
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("pw");
        std::fs::write(&path, "s3cret\n").unwrap();
        assert_eq!(
            password(Some(&path), "--password-file", Some("env".into()))
                .unwrap()
                .as_deref(),
            Some("s3cret")
        );
        assert_eq!(password(None, "--password-file", None).unwrap(), None);
    }
}
