//! Ports on `127.0.0.1`: finding a free one, and connecting to a server on
//! one to ask whether it is ready.

use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::time::Duration;

/// How long [`connect_local`] waits for the connection.
const CONNECT_TIMEOUT: Duration = Duration::from_millis(500);

/// How long a read or write on a [`connect_local`] stream may block.
const IO_TIMEOUT: Duration = Duration::from_secs(2);

/// Returns a TCP port on `127.0.0.1` that was free a moment ago.
///
/// The port is found by binding port 0 and releasing it, so another process
/// can take it before it is used; [`PgCluster::start`](crate::PgCluster::start)
/// retries with a new port when that happens.
///
/// # Panics
///
/// If no socket can be bound on `127.0.0.1`.
pub fn free_port() -> u16 {
    TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .and_then(|listener| listener.local_addr())
        .map(|addr| addr.port())
        .expect("binding a TCP socket on 127.0.0.1 to find a free port")
}

/// A connection to `127.0.0.1:port` (within half a second) whose reads and
/// writes give up after two seconds, for a readiness probe; `None` if
/// nothing accepts it.
pub fn connect_local(port: u16) -> Option<TcpStream> {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let stream = TcpStream::connect_timeout(&addr, CONNECT_TIMEOUT).ok()?;
    stream.set_read_timeout(Some(IO_TIMEOUT)).ok()?;
    stream.set_write_timeout(Some(IO_TIMEOUT)).ok()?;
    Some(stream)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_free_port_can_be_bound_and_connected_to() {
        let port = free_port();
        let _listener = TcpListener::bind((Ipv4Addr::LOCALHOST, port)).expect("the port is free");
        assert!(connect_local(port).is_some());
    }
}
