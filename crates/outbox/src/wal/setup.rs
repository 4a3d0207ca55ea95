//! What `outbox migrate --mode wal` checks and creates on the server: the
//! settings and rights the mode needs (each refusal names the setting and
//! its fix, before anything is changed), then the publication and the
//! logical slot, created before any producer can emit a message, so none
//! is ever written that the slot would not hold.

use sqlx::PgConnection;

use crate::error::{Error, Result};
use crate::queries as q;

/// Refuses, changing nothing, unless the server can run the WAL mode with
/// slot `slot`: `wal_level = logical`, a free replication slot (or `slot`
/// already there, logical, `pgoutput`, in this database), WAL senders, and
/// a role that may replicate.
pub(crate) async fn preflight(conn: &mut PgConnection, slot: &str) -> Result<()> {
    let (wal_level, max_slots, slots_used, max_senders, may_replicate, role, existing, database): (
        String,
        i32,
        i32,
        i32,
        Option<bool>,
        String,
        Option<String>,
        String,
    ) = sqlx::query_as(q::WAL_PREFLIGHT)
        .bind(slot)
        .fetch_one(&mut *conn)
        .await
        .map_err(Error::db("reading the server's replication settings"))?;
    if wal_level != "logical" {
        return Err(Error::invalid(
            "wal_level",
            format!(
                "the server runs with wal_level = {wal_level}, and the WAL mode reads a logical replication slot, which needs wal_level = logical: run ALTER SYSTEM SET wal_level = logical and restart PostgreSQL (on a managed service, turn on its logical replication setting), or keep the table mode"
            ),
        ));
    }
    if may_replicate != Some(true) {
        return Err(Error::invalid(
            "role",
            format!(
                "role {role} has no REPLICATION attribute, which creating the slot and the relay's replication connection need: run ALTER ROLE {role} REPLICATION as a superuser, or migrate and relay as a role that has it"
            ),
        ));
    }
    if max_senders == 0 {
        return Err(Error::invalid(
            "max_wal_senders",
            "the server allows no WAL senders (max_wal_senders = 0), and the relay streams the slot through one: set max_wal_senders to at least one more than your standbys and other replication clients use, and restart PostgreSQL",
        ));
    }
    match existing {
        Some(found) => {
            let mut parts = found.splitn(3, ' ');
            let (kind, plugin, db) = (
                parts.next().unwrap_or(""),
                parts.next().unwrap_or(""),
                parts.next().unwrap_or(""),
            );
            if kind != "logical" || plugin != "pgoutput" || db != database {
                return Err(Error::invalid(
                    "slot",
                    format!(
                        "replication slot {slot} already exists for something else ({kind} slot, plugin {plugin:?}, database {db:?}; the WAL mode needs a logical pgoutput slot in {database}; slot names are one namespace for the whole server): name another with --slot, or drop it with SELECT pg_drop_replication_slot('{slot}') if nothing uses it"
                    ),
                ));
            }
        }
        None if slots_used >= max_slots => {
            return Err(Error::invalid(
                "max_replication_slots",
                format!(
                    "all {max_slots} replication slots of the server are in use: raise max_replication_slots and restart PostgreSQL, or drop an abandoned slot (SELECT slot_name, active FROM pg_replication_slots; then SELECT pg_drop_replication_slot('name'))"
                ),
            ));
        }
        None => {}
    }
    Ok(())
}

/// Creates publication and slot `slot` unless they exist; each statement
/// commits on its own (a slot cannot be created in a transaction that has
/// written). Returns whether the slot was created now.
pub(crate) async fn create_slot(conn: &mut PgConnection, slot: &str) -> Result<bool> {
    let has_publication: bool = sqlx::query_scalar(q::WAL_PUBLICATION_EXISTS)
        .bind(slot)
        .fetch_one(&mut *conn)
        .await
        .map_err(Error::db("looking for the publication"))?;
    if !has_publication {
        // The name is a validated slot name (lowercase letters, digits,
        // `_`): quoted only so that a keyword is a name too.
        sqlx::raw_sql(&format!("CREATE PUBLICATION \"{slot}\""))
            .execute(&mut *conn)
            .await
            .map_err(Error::db("creating the publication the slot is read with"))?;
    }
    let exists: bool = sqlx::query_scalar(q::WAL_SLOT_EXISTS)
        .bind(slot)
        .fetch_one(&mut *conn)
        .await
        .map_err(Error::db("looking for the replication slot"))?;
    if exists {
        return Ok(false);
    }
    sqlx::query_scalar::<_, String>(q::WAL_SLOT_CREATE)
        .bind(slot)
        .fetch_one(&mut *conn)
        .await
        .map_err(Error::db("creating the replication slot"))?;
    Ok(true)
}
