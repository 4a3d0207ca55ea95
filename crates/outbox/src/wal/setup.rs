//! What `outbox migrate --mode wal` checks and creates on the server: the
//! settings and rights the mode needs (each refusal names the setting and
//! its fix, before anything is changed), then the publication and the
//! logical slot, created before any producer can emit a message, so none
//! is ever written that the slot would not hold.

use sqlx::PgConnection;

use crate::error::{Error, Result};
use crate::queries as q;
use crate::schema::Schema;
use crate::wal::{default_slot_name, MAX_SLOT_NAME};

/// Refuses, changing nothing, unless the server can run the WAL mode with
/// slot `slot`: a UTF-8 database, `wal_level = logical`, a free
/// replication slot (or `slot` already there, logical, `pgoutput`, in this
/// database), WAL senders, and a role that may replicate.
pub(crate) async fn preflight(conn: &mut PgConnection, slot: &str) -> Result<()> {
    #[allow(clippy::type_complexity)]
    let (
        wal_level,
        max_slots,
        slots_used,
        max_senders,
        may_replicate,
        role,
        existing,
        database,
        encoding,
    ): (
        String,
        i32,
        i32,
        i32,
        Option<bool>,
        String,
        Option<String>,
        String,
        String,
    ) = sqlx::query_as(q::WAL_PREFLIGHT)
        .bind(slot)
        .fetch_one(&mut *conn)
        .await
        .map_err(Error::db("reading the server's replication settings"))?;
    refuse_encoding(&database, &encoding)?;
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

/// The slot a schema gets unless one is named: [`default_slot_name`], or,
/// when another database of the server already has a slot of that name
/// (slot names are one namespace for the whole server), one that names the
/// database too.
pub(crate) async fn default_slot(conn: &mut PgConnection, schema: &Schema) -> Result<String> {
    let name = default_slot_name(schema)?;
    let (elsewhere, database): (bool, String) = sqlx::query_as(q::WAL_SLOT_IN_OTHER_DATABASE)
        .bind(&name)
        .fetch_one(&mut *conn)
        .await
        .map_err(Error::db("looking for the replication slot"))?;
    Ok(if elsewhere {
        slot_name_with_database(&database, schema)
    } else {
        name
    })
}

/// `outbox_<database>_<schema>`, the database's name folded to what a slot
/// name may hold; past 63 characters, cut and ended by a hash of both
/// names, so that two databases never share it.
pub(crate) fn slot_name_with_database(database: &str, schema: &Schema) -> String {
    let folded: String = database
        .chars()
        .map(|c| match c.to_ascii_lowercase() {
            c @ ('a'..='z' | '0'..='9' | '_') => c,
            _ => '_',
        })
        .collect();
    let name = format!("outbox_{folded}_{}", schema.name());
    if name.len() <= MAX_SLOT_NAME && folded == database {
        return name;
    }
    // FNV-1a: stable across builds and platforms.
    let mut hash: u32 = 0x811c_9dc5;
    for b in database.bytes().chain([0]).chain(schema.name().bytes()) {
        hash = (hash ^ u32::from(b)).wrapping_mul(0x0100_0193);
    }
    let suffix = format!("_{hash:08x}");
    let keep = MAX_SLOT_NAME - suffix.len();
    format!("{}{suffix}", &name[..name.len().min(keep)])
}

/// [`refuse_encoding`] for the database `pool` reaches: a relay of a
/// schema put in the WAL mode before `migrate` checked it.
pub(crate) async fn refuse_database_encoding(pool: &sqlx::PgPool) -> Result<()> {
    let (database, encoding): (String, String) = sqlx::query_as(q::DATABASE_ENCODING)
        .fetch_one(pool)
        .await
        .map_err(Error::db("reading the database's encoding"))?;
    refuse_encoding(&database, &encoding)
}

/// Refuses a database whose messages the relay could not read: a logical
/// message arrives in the server's encoding, and the relay reads UTF-8
/// (the event's payload and names are published as UTF-8 text).
pub(crate) fn refuse_encoding(database: &str, encoding: &str) -> Result<()> {
    if encoding == "UTF8" {
        return Ok(());
    }
    Err(Error::invalid(
        "server_encoding",
        format!(
            "database {database} is encoded in {encoding}, and the WAL mode's messages arrive in the database's encoding while the relay reads UTF-8: keep the table mode for this database (it converts to UTF-8 for the relay), or move the data to a database created with ENCODING 'UTF8'"
        ),
    ))
}

/// Refuses slot `slot` for `schema` unless the outbox created it for this
/// schema, or `adopt` says to take it. Another schema's slot is refused
/// always: its relay confirms past every message that is not its own, so a
/// second schema on one slot loses its events.
pub(crate) async fn refuse_foreign_slot(
    conn: &mut PgConnection,
    schema: &Schema,
    slot: &str,
    recorded: Option<&str>,
    adopt: bool,
) -> Result<()> {
    let others: Vec<String> = sqlx::query_scalar(q::WAL_OTHER_SCHEMAS)
        .bind(schema.name())
        .fetch_all(&mut *conn)
        .await
        .map_err(Error::db("looking for other schemas' replication slots"))?;
    for other in others {
        // The name comes from the catalog: quoted as an identifier.
        let sql = format!(
            "SELECT slot_name FROM \"{}\".outbox_wal",
            other.replace('"', "\"\"")
        );
        let theirs: Option<String> = sqlx::query_scalar(&sql)
            .fetch_optional(&mut *conn)
            .await
            .map_err(Error::db("reading another schema's replication slot"))?;
        if theirs.as_deref() == Some(slot) {
            return Err(Error::invalid(
                "slot",
                format!(
                    "replication slot {slot} serves schema {other}: a slot is read by one schema's relay, which confirms past every other message, so schema {} would lose its events there. Leave --slot out (each schema gets its own), or name a slot of its own",
                    schema.name()
                ),
            ));
        }
    }
    if recorded == Some(slot) {
        return Ok(());
    }
    let owner: Option<Option<String>> = sqlx::query_scalar(q::WAL_PUBLICATION_OWNER)
        .bind(slot)
        .fetch_optional(&mut *conn)
        .await
        .map_err(Error::db("reading the publication's owner"))?;
    let ours = publication_comment(schema);
    let slot_exists: bool = sqlx::query_scalar(q::WAL_SLOT_EXISTS)
        .bind(slot)
        .fetch_one(&mut *conn)
        .await
        .map_err(Error::db("looking for the replication slot"))?;
    match owner {
        Some(Some(comment)) if comment == ours => Ok(()),
        Some(Some(comment)) if comment.starts_with("outbox:") => Err(Error::invalid(
            "slot",
            format!(
                "replication slot {slot} was created for schema {}: name a slot of its own for schema {}, or leave --slot out",
                &comment["outbox:".len()..],
                schema.name()
            ),
        )),
        // Neither slot nor publication: both are created for this schema.
        None if !slot_exists => Ok(()),
        _ if adopt => Ok(()),
        _ => Err(Error::invalid(
            "slot",
            format!(
                "replication slot {slot} (or its publication) exists and was not created by outbox migrate for schema {}: the relay would confirm past whatever it holds for its other reader, and drop it at a switch back to the table mode. Name another slot with --slot, or pass --adopt-slot if it is meant for this outbox",
                schema.name()
            ),
        )),
    }
}

/// The comment that marks a publication (and so its slot) as created by
/// `outbox migrate --mode wal` for `schema`.
pub(crate) fn publication_comment(schema: &Schema) -> String {
    format!("outbox:{}", schema.name())
}

/// Creates publication and slot `slot` unless they exist; each statement
/// commits on its own (a slot cannot be created in a transaction that has
/// written). Returns whether the slot was created now.
pub(crate) async fn create_slot(
    conn: &mut PgConnection,
    schema: &Schema,
    slot: &str,
) -> Result<bool> {
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
    // Marks slot and publication as this schema's (a slot has no comment
    // of its own): `refuse_foreign_slot` reads it.
    sqlx::raw_sql(&format!(
        "COMMENT ON PUBLICATION \"{slot}\" IS '{}'",
        publication_comment(schema)
    ))
    .execute(&mut *conn)
    .await
    .map_err(Error::db("marking the publication as the outbox's"))?;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slot_named_after_the_database_fits_and_never_joins_two_databases() {
        let public = Schema::default();
        assert_eq!(
            slot_name_with_database("shop", &public),
            "outbox_shop_public"
        );
        let a = slot_name_with_database("Shop-EU", &public);
        let b = slot_name_with_database("shop_eu", &public);
        assert_ne!(
            a, b,
            "two spellings fold to one name: the hash tells them apart"
        );
        let long = Schema::new(&"s".repeat(63)).unwrap();
        let c = slot_name_with_database(&"d".repeat(63), &long);
        let d = slot_name_with_database(&format!("{}e", "d".repeat(62)), &long);
        for name in [&a, &b, &c, &d] {
            crate::wal::validate_slot_name(name).unwrap();
        }
        assert_ne!(c, d);
    }

    #[test]
    fn only_a_utf8_database_is_accepted_naming_the_encoding_and_the_fix() {
        refuse_encoding("shop", "UTF8").unwrap();
        let err = refuse_encoding("shop", "LATIN1").unwrap_err().to_string();
        assert!(
            err.contains("LATIN1") && err.contains("table mode") && err.contains("UTF8"),
            "{err}"
        );
    }
}
