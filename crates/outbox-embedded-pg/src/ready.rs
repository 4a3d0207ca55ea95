//! Whether a starting server is ready: what its `postmaster.pid` says, and
//! whether it answers a connection as `pg_isready` would.

use std::fs;
use std::io::{Read, Write};
use std::path::Path;

use crate::process::connect_local;
use crate::SUPERUSER;

/// The postmaster's pid: the first line of `postmaster.pid`.
pub(crate) fn postmaster_pid(data_dir: &Path) -> Option<u32> {
    let text = fs::read_to_string(data_dir.join("postmaster.pid")).ok()?;
    text.lines().next()?.trim().parse().ok()
}

/// Whether `postmaster.pid` says the server is ready for connections (its
/// eighth line, written by PostgreSQL 10 and later). Always `true` for older
/// servers, which leaves the decision to [`accepts_connections`].
pub(crate) fn postmaster_says_ready(data_dir: &Path) -> bool {
    let major = fs::read_to_string(data_dir.join("PG_VERSION"))
        .ok()
        .and_then(|v| v.trim().split('.').next()?.parse::<u32>().ok());
    if major.is_some_and(|major| major < 10) {
        return true;
    }
    let Ok(text) = fs::read_to_string(data_dir.join("postmaster.pid")) else {
        return false;
    };
    text.lines()
        .nth(7)
        .is_some_and(|status| matches!(status.trim(), "ready" | "standby"))
}

/// Whether a server on `127.0.0.1:port` accepts a connection as the
/// superuser, as `pg_isready` would report: connects, sends a startup
/// message and expects `AuthenticationOk` (the cluster trusts everyone).
/// While the server is starting up it answers with an error instead.
pub(crate) fn accepts_connections(port: u16) -> bool {
    let Some(mut stream) = connect_local(port) else {
        return false;
    };
    if stream.write_all(&startup_message()).is_err() {
        return false;
    }
    // 'R', length 8, code 0 (AuthenticationOk).
    let mut reply = [0_u8; 9];
    if stream.read_exact(&mut reply).is_err() {
        return false;
    }
    let ready = reply == [b'R', 0, 0, 0, 8, 0, 0, 0, 0];
    if ready {
        // Terminate, politely.
        let _ = stream.write_all(&[b'X', 0, 0, 0, 4]);
    }
    ready
}

/// A protocol 3.0 startup message for the superuser and database `postgres`.
fn startup_message() -> Vec<u8> {
    let mut body = 196_608_u32.to_be_bytes().to_vec(); // protocol 3.0
    for part in ["user", SUPERUSER, "database", "postgres", ""] {
        body.extend_from_slice(part.as_bytes());
        body.push(0);
    }
    let len = u32::try_from(body.len() + 4).expect("startup message is small");
    let mut message = len.to_be_bytes().to_vec();
    message.extend_from_slice(&body);
    message
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_startup_message_is_length_prefixed_protocol_3() {
        let message = startup_message();
        let len = u32::from_be_bytes(message[..4].try_into().unwrap());
        assert_eq!(len as usize, message.len());
        assert_eq!(message[4..8], [0, 3, 0, 0]);
        assert!(message.ends_with(b"database\0postgres\0\0"));
    }

    #[test]
    fn the_pid_file_says_who_runs_and_whether_it_is_ready() {
        let dir = tempfile::tempdir().expect("temp dir");
        assert_eq!(postmaster_pid(dir.path()), None);
        assert!(!postmaster_says_ready(dir.path()));
        fs::write(dir.path().join("PG_VERSION"), "15\n").unwrap();
        let pid_file = dir.path().join("postmaster.pid");
        fs::write(
            &pid_file,
            "4242\n/data\n1\n5432\n/tmp\n127.0.0.1\n1 2\nstarting\n",
        )
        .unwrap();
        assert_eq!(postmaster_pid(dir.path()), Some(4242));
        assert!(!postmaster_says_ready(dir.path()));
        fs::write(
            &pid_file,
            "4242\n/data\n1\n5432\n/tmp\n127.0.0.1\n1 2\nready   \n",
        )
        .unwrap();
        assert!(postmaster_says_ready(dir.path()));
    }
}
