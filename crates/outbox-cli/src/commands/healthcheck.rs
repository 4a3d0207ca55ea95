//! `outbox healthcheck`: asks a running relay's `GET /readyz` whether it is
//! ready, prints one line saying why or why not, and exits 0 (ready) or 1.
//! For images without curl, and for systemd or Kubernetes exec probes. The
//! address is `--http-addr`, else the configuration's `http.addr`
//! (`OUTBOX_HTTP_ADDR`); a relay listening on every interface
//! (`0.0.0.0:9090`) is asked on the loopback.

use std::process::ExitCode;
use std::time::Duration;

use anyhow::{bail, Result};
use clap::Args;
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::ctx::Ctx;

/// The most of an answer read: `/readyz` answers are a few hundred bytes.
const MAX_ANSWER: u64 = 64 * 1024;

#[derive(Debug, Args)]
pub struct HealthcheckArgs {
    /// The relay's HTTP address, HOST:PORT [default: http.addr, env
    /// OUTBOX_HTTP_ADDR].
    #[arg(long, value_name = "HOST:PORT")]
    pub http_addr: Option<String>,
    /// How long the relay may take to answer, milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 5000)]
    pub timeout_ms: u64,
}

pub async fn run(ctx: &Ctx, args: HealthcheckArgs) -> Result<ExitCode> {
    let Some(addr) = args
        .http_addr
        .or_else(|| ctx.loaded.config.http.addr.clone())
    else {
        bail!(
            "no address to probe: pass --http-addr HOST:PORT or set http.addr (OUTBOX_HTTP_ADDR)"
        );
    };
    let target = probe_address(&addr);
    let shown = shown_address(&target);
    let timeout = Duration::from_millis(args.timeout_ms);
    let (ready, line) = match tokio::time::timeout(timeout, get_readyz(&target)).await {
        Ok(Ok((status, body))) => verdict(status, &body),
        Ok(Err(e)) => (false, format!("not ready: nothing answers on {shown}: {e}")),
        Err(_) => (
            false,
            format!(
                "not ready: {shown} did not answer within {} ms",
                args.timeout_ms
            ),
        ),
    };
    println!("{line}");
    Ok(if ready {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// Where to connect for a relay listening on `addr`: the loopback when it
/// listens on every interface.
pub fn probe_address(addr: &str) -> String {
    match addr.rsplit_once(':') {
        Some(("0.0.0.0" | "", port)) => format!("127.0.0.1:{port}"),
        Some(("[::]", port)) => format!("[::1]:{port}"),
        _ => addr.to_owned(),
    }
}

/// `target` as the line shows it: as given when it is plain ASCII, else
/// quoted with its control characters (escapes, line breaks) and bidi
/// controls escaped, so no address reaches the terminal raw.
pub fn shown_address(target: &str) -> String {
    if target.chars().all(|c| c.is_ascii_graphic()) {
        target.to_owned()
    } else {
        crate::text::cut(target)
    }
}

/// `GET /readyz` on `target`: (status, body).
async fn get_readyz(target: &str) -> std::io::Result<(u16, String)> {
    let mut stream = TcpStream::connect(target).await?;
    let request = format!("GET /readyz HTTP/1.1\r\nHost: {target}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await?;
    let mut raw = Vec::new();
    stream.take(MAX_ANSWER).read_to_end(&mut raw).await?;
    let raw = String::from_utf8_lossy(&raw);
    let (head, body) = raw.split_once("\r\n\r\n").unwrap_or((&raw, ""));
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| std::io::Error::other("the answer is not HTTP"))?;
    Ok((status, body.to_owned()))
}

/// Ready or not, and the line that says why, from `/readyz`'s answer.
///
/// Ready means an answer a relay gives: HTTP 200 with `"status":
/// "ready"`. Anything else on the port (another server's 200, a body that
/// is not the relay's) is not ready, and the line says what came.
pub fn verdict(status: u16, body: &str) -> (bool, String) {
    let json: Option<Value> = serde_json::from_str(body).ok();
    match (status, json) {
        (200, Some(v)) if v["status"] != "ready" => (
            false,
            format!(
                "not ready: HTTP 200 from /readyz, but not a relay's answer (its \"status\" is {})",
                crate::text::cut(&v["status"].to_string())
            ),
        ),
        (200, None) => (
            false,
            "not ready: HTTP 200 from /readyz, but not a relay's answer (not JSON)".to_owned(),
        ),
        (200, Some(v)) if v["checks"]["sources"].is_object() => {
            let sources = &v["checks"]["sources"];
            (
                true,
                format!(
                    "ready: {} of {} sources healthy",
                    sources["healthy"], sources["total"]
                ),
            )
        }
        (200, Some(v)) => {
            let relay = &v["checks"]["relay"];
            let state = relay["state"].as_str().unwrap_or("running");
            let owned = &relay["partitions_owned"];
            let total = &relay["partitions_total"];
            (
                true,
                format!("ready: {state}, {owned} of {total} partitions held"),
            )
        }
        (_, Some(v)) => {
            let problems: Vec<&str> = v["problems"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .collect();
            let why = match problems.is_empty() {
                true => format!("HTTP {status}"),
                false => problems.join("; "),
            };
            (false, format!("not ready: {why}"))
        }
        (_, None) => (false, format!("not ready: HTTP {status} from /readyz")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_relay_on_every_interface_is_asked_on_the_loopback() {
        assert_eq!(probe_address("0.0.0.0:9090"), "127.0.0.1:9090");
        assert_eq!(probe_address("[::]:9090"), "[::1]:9090");
        assert_eq!(probe_address(":9090"), "127.0.0.1:9090");
        assert_eq!(probe_address("10.0.0.5:9090"), "10.0.0.5:9090");
        assert_eq!(probe_address("relay.internal:9090"), "relay.internal:9090");
    }

    #[test]
    fn only_a_relays_ready_answer_is_ready() {
        for body in ["ok", "{\"ready\": false}", "{\"status\": \"alive\"}", ""] {
            let (ready, line) = verdict(200, body);
            assert!(!ready, "{body:?}: {line}");
            assert!(line.contains("not a relay's answer"), "{line}");
        }
    }

    #[test]
    fn ready_says_what_the_relay_holds() {
        let body = r#"{"status":"ready","problems":[],"checks":{"relay":{"state":"running","partitions_owned":16,"partitions_total":32}}}"#;
        assert_eq!(
            verdict(200, body),
            (true, "ready: running, 16 of 32 partitions held".to_owned())
        );
    }

    #[test]
    fn not_ready_names_every_problem_on_one_line() {
        let body = r#"{"status":"not ready","problems":["database: connection refused","publisher http: HTTP 503"]}"#;
        assert_eq!(
            verdict(503, body),
            (
                false,
                "not ready: database: connection refused; publisher http: HTTP 503".to_owned()
            )
        );
        assert_eq!(
            verdict(404, "nope"),
            (false, "not ready: HTTP 404 from /readyz".to_owned())
        );
    }
}
