//! Where the process listens: `http.addr` and the console's `--listen`
//! checked ([`listen_addrs`], which validation runs too) and bound
//! ([`bind`]).

use std::net::SocketAddr;

use anyhow::{Context, Result};
use tokio::net::TcpListener;

/// How to write an address to listen on.
const ADDR_FORM: &str = "use HOST:PORT, e.g. 127.0.0.1:9090 or 0.0.0.0:9090";

/// The addresses `addr` (`HOST:PORT`, the host a name or an IP address)
/// stands for, resolved as [`bind`] resolves them; or why it stands for
/// none. The one check of `http.addr`: validation runs it, so `outbox
/// config check` refuses what `outbox relay` could not listen on.
pub fn listen_addrs(addr: &str) -> std::result::Result<Vec<SocketAddr>, String> {
    use std::net::ToSocketAddrs;

    if addr.contains("://") {
        return Err(format!(
            "an address to listen on has no scheme: {ADDR_FORM}"
        ));
    }
    let shaped = addr
        .rsplit_once(':')
        .is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok());
    if !shaped {
        return Err(ADDR_FORM.to_owned());
    }
    match addr.to_socket_addrs() {
        Ok(found) => {
            let found: Vec<SocketAddr> = found.collect();
            if found.is_empty() {
                return Err(format!("the host has no address: {ADDR_FORM}"));
            }
            Ok(found)
        }
        Err(e) => Err(format!(
            "not an address this machine can listen on ({}): {ADDR_FORM}",
            crate::text::one_line(&e.to_string())
        )),
    }
}

/// Binds `addr` (`HOST:PORT`).
pub async fn bind(addr: &str) -> Result<TcpListener> {
    let found = listen_addrs(addr).map_err(anyhow::Error::msg)?;
    TcpListener::bind(&found[..])
        .await
        .with_context(|| format!("cannot listen on {addr}"))
}

/// The address a listener is bound to, for logs.
pub fn local_addr(listener: &TcpListener) -> Option<SocketAddr> {
    listener.local_addr().ok()
}
