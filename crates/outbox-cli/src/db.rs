//! Connecting to PostgreSQL: the URL is checked before anything is tried,
//! a server that refuses or does not answer is reported at once with its
//! own error, and passwords never show.

use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use outbox::redact::{redact_url, shorten};
use outbox_console::is_mapped_loopback;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{ConnectOptions, Connection, PgPool};

/// The one redaction, re-exported for the modules that print messages.
pub use outbox::redact::redact_text;

/// The form a database URL takes, for error messages.
const FORM: &str = "postgres://USER:PASS@HOST:PORT/DB";

/// How long opening a connection may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// The database URL from `--database-url` / `DATABASE_URL`, or a clear error.
pub fn require_url(url: &Option<String>) -> Result<String> {
    match url {
        Some(url) if !url.trim().is_empty() => Ok(url.clone()),
        Some(_) => {
            bail!("the database URL is empty: pass --database-url {FORM} or set DATABASE_URL")
        }
        None => bail!("no database given: pass --database-url {FORM} or set DATABASE_URL"),
    }
}

/// The database `options` reach, however the URL spells it: the socket or
/// the host (every name of this machine's loopback as `localhost`, names
/// lowercased), the port, and the database (the user's name when the URL
/// names none, as PostgreSQL defaults it). Options such as
/// `connect_timeout` are left out. Two URLs with one address reach one
/// database; the relay also compares what the servers say
/// ([`outbox::sources::database_identity`]), which sees through other
/// names for one host.
pub fn database_address(options: &PgConnectOptions) -> String {
    let host = match options.get_socket() {
        Some(dir) => dir.display().to_string(),
        None => {
            let host = options
                .get_host()
                .trim_matches(['[', ']'])
                .to_ascii_lowercase();
            let loopback = host == "localhost"
                || host.ends_with(".localhost")
                || host
                    .parse::<std::net::IpAddr>()
                    .is_ok_and(|ip| ip.is_loopback() || is_mapped_loopback(ip));
            if loopback {
                "localhost".to_owned()
            } else {
                host
            }
        }
    };
    let database = options
        .get_database()
        .unwrap_or_else(|| options.get_username());
    format!("{host}:{}/{database}", options.get_port())
}

/// Checks that `url` is a PostgreSQL URL (`postgres://` or
/// `postgresql://`) and parses it. Other schemes are refused before any
/// connection is tried; so are libpq `key=value` strings, which the driver
/// does not read.
pub fn check_url(url: &str) -> Result<PgConnectOptions> {
    if url.trim().is_empty() {
        bail!("the database URL is empty: use {FORM}");
    }
    let shown = redact_url(url);
    let scheme = url.split_once("://").map(|(s, _)| s.trim()).filter(|s| {
        !s.is_empty()
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c))
    });
    match scheme.map(str::to_ascii_lowercase).as_deref() {
        Some("postgres" | "postgresql") => {}
        Some(other) => bail!(
            "invalid database URL {shown}: {}:// is not PostgreSQL: use {FORM} (or postgresql://…)",
            shorten(other, 20)
        ),
        None if url.contains('=') && !url.contains("://") => bail!(
            "invalid database URL {shown}: libpq connection strings (host=… dbname=…) are not supported: write it as a URL, {FORM}"
        ),
        None => bail!("invalid database URL {shown}: not a URL: use {FORM}"),
    }
    if let Some(problem) = ssl_mode_problem(url) {
        bail!("invalid database URL {shown}: {problem}");
    }
    let options = url.parse().map_err(|e: sqlx::Error| {
        if reserved_in_credentials(url) {
            return anyhow!(
                "invalid database URL {shown}: the user name or password holds a '/', '#' or '?', which end that part of a URL: percent-encode them (/ as %2F, # as %23, ? as %3F)"
            );
        }
        // The driver's configuration errors wrap one another, each adding
        // the same phrase.
        let why = e.to_string().replace("error with configuration: ", "");
        anyhow!(
            "invalid database URL {shown}: {} (expected {FORM})",
            redact_text(&why)
        )
    })?;
    for name in unknown_parameters(url) {
        tracing::warn!(
            "ignoring parameter {} of the database URL: the driver does not know it (known: {})",
            redact_text(&name),
            KNOWN_PARAMETERS.join(", ")
        );
    }
    Ok(options)
}

/// The values `sslmode` takes.
const SSL_MODES: &[&str] = &[
    "disable",
    "allow",
    "prefer",
    "require",
    "verify-ca",
    "verify-full",
];

/// What is wrong with the `sslmode` of `url`, if anything.
fn ssl_mode_problem(url: &str) -> Option<String> {
    let (_, query) = url.split_once('?')?;
    query.split('&').find_map(|p| {
        let (name, value) = p.split_once('=').unwrap_or((p, ""));
        let known = matches!(name, "sslmode" | "ssl-mode");
        let fine = SSL_MODES.iter().any(|m| m.eq_ignore_ascii_case(value));
        (known && !fine).then(|| {
            format!(
                "{name}={} is not an SSL mode: use {}",
                shorten(&format!("{value:?}"), 40),
                SSL_MODES.join(", ")
            )
        })
    })
}

/// Whether what stands between `://` and the last `@` before the host
/// holds a character that ends a URL's user and password (`/`, `#`, `?`):
/// a password written as it is rather than percent-encoded.
fn reserved_in_credentials(url: &str) -> bool {
    let Some((_, rest)) = url.split_once("://") else {
        return false;
    };
    rest.rfind('@')
        .is_some_and(|at| rest[..at].contains(['/', '#', '?']))
}

/// The URL query parameters the driver reads; it ignores the others (and
/// its own warning about them, silenced in `config::log_filter`, quotes
/// their values).
const KNOWN_PARAMETERS: &[&str] = &[
    "sslmode",
    "ssl-mode",
    "sslrootcert",
    "ssl-root-cert",
    "ssl-ca",
    "sslcert",
    "ssl-cert",
    "sslkey",
    "ssl-key",
    "statement-cache-capacity",
    "host",
    "hostaddr",
    "port",
    "dbname",
    "user",
    "password",
    "application_name",
    "options",
];

/// The names of the query parameters of `url` the driver does not read.
fn unknown_parameters(url: &str) -> Vec<String> {
    let Some((_, query)) = url.split_once('?') else {
        return Vec::new();
    };
    query
        .split('&')
        .filter_map(|p| p.split('=').next())
        .filter(|name| {
            let known = KNOWN_PARAMETERS.contains(name)
                || (name.starts_with("options[") && name.ends_with(']'));
            !name.is_empty() && !known
        })
        .map(str::to_owned)
        .collect()
}

/// Connects a pool of `max` connections, failing within a few seconds.
pub async fn connect(url: &str, max: u32) -> Result<PgPool> {
    connect_flagging_slow(url, max, Duration::from_secs(10)).await
}

/// [`connect`], warning about statements slower than `slow` (bulk loads
/// in benchmarks are slow on purpose).
pub async fn connect_flagging_slow(url: &str, max: u32, slow: Duration) -> Result<PgPool> {
    connect_with(url, max, slow, CONNECT_TIMEOUT, None).await
}

/// The pool of a database many sources share: `statements` prepared
/// statements cached per connection (each source has its own, its
/// schema's names in them), and waits for a connection up to
/// `SHARED_ACQUIRE_TIMEOUT`, since many sources with work queue for few
/// connections.
pub async fn connect_shared(url: &str, max: u32, statements: usize) -> Result<PgPool> {
    connect_with(
        url,
        max,
        Duration::from_secs(10),
        SHARED_ACQUIRE_TIMEOUT,
        Some(statements),
    )
    .await
}

/// How long a source waits for a connection of its database's shared pool
/// before it counts the database as unavailable.
const SHARED_ACQUIRE_TIMEOUT: Duration = Duration::from_secs(30);

async fn connect_with(
    url: &str,
    max: u32,
    slow: Duration,
    acquire: Duration,
    statements: Option<usize>,
) -> Result<PgPool> {
    let mut options = check_url(url)?;
    if let Some(n) = statements {
        options = options.statement_cache_capacity(n);
    }
    // Batch statements (claims of thousands of rows, bulk loads) are
    // legitimately slow now and then; only flag the pathological ones.
    let options = options
        .log_statements(log::LevelFilter::Debug)
        .log_slow_statements(log::LevelFilter::Warn, slow);
    let shown = redact_url(url);
    // One connection first: a pool only says it timed out, after waiting
    // the whole acquire timeout; a single connection fails at once with
    // the server's (or the network's) own reason.
    match tokio::time::timeout(CONNECT_TIMEOUT, options.connect()).await {
        Ok(Ok(conn)) => {
            let _ = conn.close().await;
        }
        Ok(Err(e)) => bail!("cannot connect to {shown}: {}", describe(&e, &options)),
        Err(_) => bail!(
            "cannot connect to {shown}: no answer within {} s (is the host reachable and the port right?)",
            CONNECT_TIMEOUT.as_secs()
        ),
    }
    PgPoolOptions::new()
        .max_connections(max)
        .acquire_timeout(acquire)
        .connect_with(options)
        .await
        .with_context(|| format!("cannot connect to {shown}"))
}

/// Why a connection failed, in words an operator can act on.
fn describe(e: &sqlx::Error, options: &PgConnectOptions) -> String {
    match e {
        sqlx::Error::Io(io) if io.kind() == std::io::ErrorKind::ConnectionRefused => format!(
            "connection refused: nothing listens on {}:{} (is PostgreSQL running there?)",
            redact_text(options.get_host()),
            options.get_port()
        ),
        other => redact_text(&other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unencoded_slashes_hashes_and_question_marks_in_passwords_are_named() {
        for password in ["a/b", "a#b", "a?b", "12/ab"] {
            let url = format!("postgres://app:{password}@127.0.0.1:5432/db");
            assert!(reserved_in_credentials(&url), "{url}");
        }
        for url in [
            "postgres://app:a%2Fb@127.0.0.1:5432/db",
            "postgres://app@127.0.0.1/db?application_name=x",
            "postgres://127.0.0.1/db",
        ] {
            assert!(!reserved_in_credentials(url), "{url}");
        }
        let e = check_url("postgres://app:a/hunter2@127.0.0.1:5432/db")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("percent-encode") && !e.contains("hunter2"),
            "{e}"
        );
    }

    #[test]
    fn an_unknown_ssl_mode_is_one_sentence_with_the_modes() {
        let e = check_url("postgres://app@h/db?sslmode=bogus")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("sslmode=\"bogus\" is not an SSL mode")
                && e.contains("disable, allow, prefer, require, verify-ca, verify-full"),
            "{e}"
        );
        assert!(!e.contains("error with configuration"), "{e}");
        for mode in SSL_MODES {
            check_url(&format!("postgres://app@h/db?sslmode={mode}")).unwrap();
        }
        check_url("postgres://app@h/db?ssl-mode=Require").unwrap();
    }

    #[test]
    fn only_postgres_urls_are_accepted() {
        for ok in [
            "postgres://app:pw@db:5432/x",
            "postgresql://db/x?sslmode=disable",
            "POSTGRES://db/x",
        ] {
            check_url(ok).unwrap_or_else(|e| panic!("{ok}: {e}"));
        }
        for (bad, says) in [
            ("http://u:S3cr3t@db/x", "http:// is not PostgreSQL"),
            ("mysql://u:S3cr3t@db/x", "mysql:// is not PostgreSQL"),
            (
                "host=db password=S3cr3t dbname=x",
                "connection strings (host=… dbname=…) are not supported",
            ),
            ("db:5432", "not a URL"),
            ("", "empty"),
            ("   ", "empty"),
            ("postgres://u:S3cr3t@db:notaport/x", "invalid database URL"),
        ] {
            let e = format!("{:#}", check_url(bad).unwrap_err());
            assert!(e.contains(says), "{bad}: {e}");
            assert!(!e.contains("S3cr3t") && !e.contains('\n'), "{e}");
            assert!(e.contains(FORM), "{e}");
        }
        assert_eq!(
            unknown_parameters("postgres://h/x?sslmode=require&sslpassword=S3cr3t&options[a]=b"),
            ["sslpassword"]
        );
        assert!(require_url(&Some(" ".into())).is_err());
        assert!(require_url(&None).is_err());
    }

    #[tokio::test]
    async fn a_refused_connection_says_so_at_once() {
        let port = outbox_testkit::postgres::free_port();
        let url = format!("postgres://app:S3cr3t@127.0.0.1:{port}/x");
        let started = std::time::Instant::now();
        let e = format!("{:#}", connect(&url, 1).await.unwrap_err());
        assert!(started.elapsed() < Duration::from_secs(2), "{e}");
        assert!(e.contains("connection refused"), "{e}");
        assert!(
            e.contains(&format!("postgres://app:***@127.0.0.1:{port}/x")),
            "{e}"
        );
        assert!(!e.contains("S3cr3t"), "{e}");
    }
}
