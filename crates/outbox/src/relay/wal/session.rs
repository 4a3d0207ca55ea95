//! One replication session on the schema's slot: the connection, what the
//! server's refusals mean (each names the setting and its fix), and the
//! slot's single reader (a slot streams to one session at a time: another
//! relay's START_REPLICATION is refused while one reads, and that relay
//! stands by).

use std::time::Duration;

use pgwire_replication::{Lsn, PgWireError, ReplicationClient, ReplicationConfig};

use super::ReplicationTarget;
use crate::wal::switch_back::SlotHealth;

/// How often an idle session reports its position.
const IDLE_STATUS: Duration = Duration::from_secs(10);

/// Why a session did not start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum NotStarted {
    /// Another session reads the slot: stand by and try again.
    SlotBusy(String),
    /// The slot does not exist, or the server invalidated it.
    SlotGone(SlotHealth),
    /// The server has no free WAL sender: fatal at the start (a setting to
    /// change), retried once the relay runs (another client may leave).
    NoSender(String),
    /// The server or the setup refuses, and waiting will not change it:
    /// the message names the fix.
    Refused(String),
    /// Anything else (the server restarting, the network): try again.
    Failed(String),
}

impl std::fmt::Display for NotStarted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NotStarted::SlotBusy(m)
            | NotStarted::NoSender(m)
            | NotStarted::Refused(m)
            | NotStarted::Failed(m) => f.write_str(m),
            NotStarted::SlotGone(health) => f.write_str(&health.describe("of the schema")),
        }
    }
}

/// Opens a session on `slot` and waits until the server has started
/// streaming it to this session, from the slot's confirmed position.
pub(crate) async fn open(
    target: &ReplicationTarget,
    slot: &str,
    publication: &str,
    status_interval: Duration,
    start: Option<Lsn>,
) -> Result<Session, NotStarted> {
    let config = ReplicationConfig::new(
        target.host.clone(),
        target.user.clone(),
        target.password.clone(),
        target.database.clone(),
        slot.to_owned(),
        publication.to_owned(),
    )
    .with_port(target.port)
    .with_status_interval(status_interval)
    // An idle session reports its position this often (the server's
    // keepalives come every wal_sender_timeout / 2 besides); a confirmed
    // batch is reported within `status_interval`.
    .with_wakeup_interval(IDLE_STATUS)
    // As libpq does: PGAPPNAME names the session when set, so the
    // walsender can be told apart with the relay's other sessions.
    .with_application_name(
        std::env::var("PGAPPNAME").unwrap_or_else(|_| "outbox-relay".to_owned()),
    );
    let config = match start {
        Some(lsn) => config.with_start_lsn(lsn),
        None => config,
    };
    let mut client = ReplicationClient::connect_gated(config)
        .await
        .map_err(|e| classify(&e, target, slot))?;
    // The walsender's pid, asked on the session before it starts: the
    // slot names it as its reader for as long as this session holds it.
    let rows = client
        .simple_query("SELECT pg_backend_pid()")
        .await
        .map_err(|e| classify(&e, target, slot))?;
    let pid = rows
        .first()
        .and_then(|row| row.first().cloned().flatten())
        .and_then(|b| std::str::from_utf8(&b).ok()?.parse::<i32>().ok())
        .ok_or_else(|| {
            NotStarted::Failed("the replication session did not tell its pid".to_owned())
        })?;
    client
        .start()
        .await
        .map_err(|e| classify(&e, target, slot))?;
    client
        .wait_started()
        .await
        .map_err(|e| classify(&e, target, slot))?;
    Ok(Session { client, pid })
}

/// A session that holds the slot.
pub(crate) struct Session {
    pub client: ReplicationClient,
    /// Its walsender's pid: `pg_replication_slots.active_pid` while it
    /// holds the slot. What the reader writes is fenced by it.
    pub pid: i32,
}

/// What a failed session start means, from the server's message.
pub(crate) fn classify(e: &PgWireError, target: &ReplicationTarget, slot: &str) -> NotStarted {
    let text = e.to_string();
    let user = &target.user;
    if text.contains("is active for PID") {
        return NotStarted::SlotBusy(format!(
            "replication slot {slot} is being read by another session (another relay): standing by until it is free"
        ));
    }
    if text.contains("does not exist") && text.contains("replication slot") {
        return NotStarted::SlotGone(SlotHealth::Missing);
    }
    if text.contains("can no longer get changes from replication slot")
        || text.contains("cannot read from logical replication slot")
        || text.contains("has been invalidated")
    {
        return NotStarted::SlotGone(SlotHealth::Lost);
    }
    if text.contains("must be superuser or replication role")
        || text.contains("permission denied to start WAL sender")
        || text.contains("must have the REPLICATION attribute")
    {
        return NotStarted::Refused(format!(
            "role {user} may not open a replication connection: run ALTER ROLE {user} REPLICATION as a superuser, or run the relay as a role that has it"
        ));
    }
    if text.contains("max_wal_senders") {
        return NotStarted::NoSender(format!(
            "the server has no free WAL sender ({}): raise max_wal_senders and restart PostgreSQL, or stop a replication client that is not needed",
            text.trim()
        ));
    }
    if text.contains("no pg_hba.conf entry for replication connection") {
        return NotStarted::Refused(format!(
            "the server's pg_hba.conf has no entry for a replication connection of {user}: add a line such as `host replication {user} 0.0.0.0/0 scram-sha-256` (a database of `all` does not cover replication) and reload"
        ));
    }
    if text.contains("unsupported startup parameter") && text.contains("replication")
        || text.contains("pgbouncer")
    {
        return NotStarted::Refused(format!(
            "the relay's database URL reaches a connection pooler (PgBouncer), which cannot carry a replication connection: give the WAL mode's relay the PostgreSQL server's own address ({})",
            text.trim()
        ));
    }
    if text.contains("logical decoding requires wal_level") || text.contains("wal_level") {
        return NotStarted::Refused(
            "the server runs without wal_level = logical, which the WAL mode's slot needs: run ALTER SYSTEM SET wal_level = logical and restart PostgreSQL"
                .to_owned(),
        );
    }
    if text.contains("publication") && text.contains("does not exist") {
        return NotStarted::Refused(format!(
            "the slot's publication is missing ({}): run `outbox migrate --mode wal` again, which creates it",
            text.trim()
        ));
    }
    if matches!(e, PgWireError::Auth(_)) {
        return NotStarted::Refused(format!(
            "the replication connection's login as {user} failed ({}): check the password in the database URL, and that pg_hba.conf allows a replication connection",
            text.trim()
        ));
    }
    NotStarted::Failed(text)
}
