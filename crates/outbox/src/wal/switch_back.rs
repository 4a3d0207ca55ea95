//! What `outbox migrate --mode table` does to leave the WAL mode, and what
//! ends the switch. In order:
//!
//! 1. In the migration's transaction: the table's rows are paused, a range
//!    of seq values is kept for the slot's last events, and the table
//!    mode's `outbox_emit` replaces the WAL mode's. From its commit on, no
//!    new transaction writes a message.
//! 2. [`wait_for_older`]: every transaction that was open at that commit
//!    ends (one may still commit a message: the WAL mode's `outbox_emit`
//!    takes no lock the switch could wait on).
//! 3. [`mark`]: the mark is written into the stream and its position kept.
//!    Every message is now before it.
//! 4. The relay reads the slot to the mark, then [`end`]s the switch: the
//!    pause is lifted, the slot forgotten and dropped.
//!
//! A slot that is gone (dropped, restored, failed over) or invalidated
//! holds nothing that can still be read: the switch then ends at once,
//! saying so.

use std::time::{Duration, Instant};

use sqlx::PgConnection;

use crate::error::{Error, Result};
use crate::queries as q;
use crate::schema::Schema;

/// The mark's content (no event message is this text: an event's starts
/// with its id). Only the mark at the position the switch recorded is
/// obeyed.
pub(crate) const SWITCH_TO_TABLE: &str = "switch table";

/// How long [`wait_for_older`] waits by default.
pub const DEFAULT_SWITCH_TIMEOUT: Duration = Duration::from_secs(300);

/// How often the wait says what it waits for.
const PROGRESS_EVERY: Duration = Duration::from_secs(5);

/// What became of a replication slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SlotHealth {
    /// It exists and can be read.
    Readable,
    /// It does not exist.
    Missing,
    /// The server invalidated it (`max_slot_wal_keep_size`).
    Lost,
}

impl SlotHealth {
    /// How an operator reads it, in a sentence.
    pub(crate) fn describe(self, slot: &str) -> String {
        match self {
            SlotHealth::Readable => format!("replication slot {slot} is readable"),
            SlotHealth::Missing => format!(
                "replication slot {slot} does not exist (dropped by hand, or lost in a restore or a failover)"
            ),
            SlotHealth::Lost => format!(
                "replication slot {slot} was invalidated by the server (it held more WAL than max_slot_wal_keep_size allows)"
            ),
        }
    }
}

/// Whether slot `slot` exists and can still be read.
pub(crate) async fn slot_health(conn: &mut PgConnection, slot: &str) -> Result<SlotHealth> {
    let status: Option<String> = sqlx::query_scalar(q::WAL_SLOT_HEALTH)
        .bind(slot)
        .fetch_optional(&mut *conn)
        .await
        .map_err(Error::db("reading the replication slot's state"))?;
    Ok(match status.as_deref() {
        None => SlotHealth::Missing,
        Some("lost") => SlotHealth::Lost,
        Some(_) => SlotHealth::Readable,
    })
}

/// Step 1, in the migration's transaction (before the table mode's
/// `outbox_emit` is installed in it).
pub(crate) async fn begin(conn: &mut PgConnection, schema: &Schema) -> Result<()> {
    sqlx::query(&schema.render(q::WAL_SWITCH_PAUSE))
        .execute(&mut *conn)
        .await
        .map_err(Error::db("pausing the table until the slot is read"))?;
    sqlx::query(&schema.render(q::WAL_SWITCH_KEEP_SEQS))
        .execute(&mut *conn)
        .await
        .map_err(Error::db("keeping seq values for the slot's last events"))?;
    Ok(())
}

/// The switch in progress, if any: `Some(None)` while it waits for its
/// mark, `Some(Some(lsn))` once the mark is written.
pub(crate) async fn state(
    conn: &mut PgConnection,
    schema: &Schema,
) -> Result<Option<Option<String>>> {
    let row: Option<(bool, Option<String>)> = sqlx::query_as(&schema.render(q::WAL_SWITCH_STATE))
        .fetch_optional(&mut *conn)
        .await
        .map_err(Error::db("reading the switch in progress"))?;
    Ok(match row {
        Some((true, mark)) => Some(mark),
        _ => None,
    })
}

/// Step 2: waits until every transaction open in this database now (but
/// this session's) has ended, saying every few seconds which are left.
/// Past `timeout` it fails, naming them; the switch stays in progress
/// (the table's rows wait), and running the switch again resumes here.
pub(crate) async fn wait_for_older(conn: &mut PgConnection, timeout: Duration) -> Result<()> {
    let (virtual_ids, prepared): (Vec<String>, Vec<String>) = sqlx::query_as(q::OLDER_TRANSACTIONS)
        .fetch_one(&mut *conn)
        .await
        .map_err(Error::db("listing the transactions older than the switch"))?;
    let started = Instant::now();
    let mut said = Instant::now();
    let mut pause = Duration::from_millis(20);
    loop {
        let left: Vec<(Option<i32>, String, String, f64)> =
            sqlx::query_as(q::OLDER_TRANSACTIONS_LEFT)
                .bind(&virtual_ids)
                .bind(&prepared)
                .fetch_all(&mut *conn)
                .await
                .map_err(Error::db("watching the transactions older than the switch"))?;
        if left.is_empty() {
            return Ok(());
        }
        let named = left
            .iter()
            .take(5)
            .map(|(pid, app, state, age)| match pid {
                Some(pid) => format!(
                    "pid {pid} ({}{state}, open {age:.0} s)",
                    if app.is_empty() {
                        String::new()
                    } else {
                        format!("{}, ", crate::redact::quoted(app))
                    }
                ),
                None => format!(
                    "prepared transaction {} (prepared {age:.0} s ago)",
                    crate::redact::quoted(app)
                ),
            })
            .collect::<Vec<_>>()
            .join(", ");
        if started.elapsed() >= timeout {
            return Err(Error::invalid(
                "mode",
                format!(
                    "{} transaction(s) older than the switch to the table mode are still open after {} s: {named}. One of them may still commit an event through the WAL mode, so the switch is not written into the stream yet; it stays in progress, and rows written meanwhile wait in the table. End them (COMMIT, ROLLBACK, or SELECT pg_terminate_backend(pid)), then run outbox migrate --mode table again: it resumes the switch",
                    left.len(),
                    timeout.as_secs()
                ),
            ));
        }
        if said.elapsed() >= PROGRESS_EVERY {
            tracing::warn!(
                open = left.len(),
                "waiting for transactions older than the switch to the table mode to end: {named}"
            );
            said = Instant::now();
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_millis(500));
    }
}

/// Step 3: writes the mark into the stream and keeps its position.
/// Returns it; `None` when no switch waited for its mark.
pub(crate) async fn mark(conn: &mut PgConnection, schema: &Schema) -> Result<Option<String>> {
    sqlx::query_scalar(&schema.render(q::WAL_SWITCH_MARK))
        .bind(crate::wal::message_prefix(schema))
        .bind(SWITCH_TO_TABLE)
        .fetch_optional(&mut *conn)
        .await
        .map_err(Error::db("marking the switch in the stream"))
}

/// Step 4: lifts the switch's pause (not an operator's), forgets the slot,
/// then drops slot and publication if nothing reads the slot. Returns
/// whether the slot is gone.
pub(crate) async fn end(conn: &mut PgConnection, schema: &Schema, slot: &str) -> Result<bool> {
    sqlx::query(&schema.render(q::WAL_SWITCH_DONE))
        .execute(&mut *conn)
        .await
        .map_err(Error::db("ending the switch to the table mode"))?;
    drop_slot(conn, slot).await
}

/// Drops slot `slot` unless a session reads it, then its publication once
/// the slot is gone. Returns whether the slot is gone.
pub(crate) async fn drop_slot(conn: &mut PgConnection, slot: &str) -> Result<bool> {
    sqlx::query(q::WAL_SLOT_DROP)
        .bind(slot)
        .execute(&mut *conn)
        .await
        .map_err(Error::db("dropping the replication slot"))?;
    let left: bool = sqlx::query_scalar(q::WAL_SLOT_EXISTS)
        .bind(slot)
        .fetch_one(&mut *conn)
        .await
        .map_err(Error::db("looking for the replication slot"))?;
    if left {
        return Ok(false);
    }
    // `query`, not `raw_sql`, whose future the relay's task could not
    // hold; the name is a validated slot name.
    sqlx::query(&format!("DROP PUBLICATION IF EXISTS \"{slot}\""))
        .execute(&mut *conn)
        .await
        .map_err(Error::db("dropping the slot's publication"))?;
    Ok(true)
}
