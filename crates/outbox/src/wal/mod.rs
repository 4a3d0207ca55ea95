//! The WAL delivery mode: events as transactional logical messages, read
//! by the relay from a replication slot (docs/architecture.md, "The WAL
//! mode").
//!
//! | concept | file |
//! |---------|------|
//! | the mode, the slot's name, the message prefix | here |
//! | what `outbox migrate --mode wal` checks and creates on the server | [`setup`] |
//! | what `outbox migrate --mode table` does to leave the mode, and what ends it | [`switch_back`] |
//! | the message `outbox_emit` writes, read back | [`message`] |

pub mod message;
pub(crate) mod setup;
pub(crate) mod switch_back;

use crate::error::{Error, Result};
use crate::queries as q;
use crate::schema::Schema;

/// Longest replication slot name PostgreSQL keeps (`NAMEDATALEN - 1`).
pub(crate) const MAX_SLOT_NAME: usize = 63;

/// How a schema's events travel from the producer's transaction to the
/// relay.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum DeliveryMode {
    /// The default: each event is a row of `outbox_events`, claimed by the
    /// relay and deleted (or marked) once published. Needs no server
    /// setting; works through PgBouncer and on every managed PostgreSQL.
    #[default]
    Table,
    /// Each event is a transactional logical message
    /// (`pg_logical_emit_message`) written by `outbox_emit`, streamed to the
    /// relay from a replication slot: no row, no claim, no delete. Needs
    /// `wal_level = logical`, a free replication slot and WAL sender, and a
    /// role with `REPLICATION`.
    Wal,
}

impl DeliveryMode {
    /// The name used on the command line and in reports: `table`, `wal`.
    pub fn name(self) -> &'static str {
        match self {
            DeliveryMode::Table => "table",
            DeliveryMode::Wal => "wal",
        }
    }

    /// Parses [`DeliveryMode::name`]; the error says which names exist.
    pub fn parse(s: &str) -> Result<Self> {
        [DeliveryMode::Table, DeliveryMode::Wal]
            .into_iter()
            .find(|m| m.name() == s)
            .ok_or_else(|| {
                Error::invalid(
                    "mode",
                    format!(
                        "{} is not a delivery mode: use table or wal",
                        crate::redact::quoted(s)
                    ),
                )
            })
    }
}

impl std::str::FromStr for DeliveryMode {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        DeliveryMode::parse(s)
    }
}

/// The slot and publication recorded for `schema` by `outbox migrate
/// --mode wal`, while the relay still has to read them (in the WAL mode, or
/// switched back to the table with the slot not yet read to the switch).
pub(crate) async fn recorded_slot<'c>(
    conn: impl sqlx::PgExecutor<'c>,
    schema: &Schema,
) -> Result<Option<(String, String)>> {
    sqlx::query_as(&schema.render(q::WAL_SLOT_RECORDED))
        .fetch_optional(conn)
        .await
        .map_err(Error::db("reading the schema's replication slot"))
}

/// [`recorded_slot`], on a schema that may not have the table yet.
pub(crate) async fn recorded_slot_if_any(
    conn: &mut sqlx::PgConnection,
    schema: &Schema,
) -> Result<Option<(String, String)>> {
    let has_table: bool = sqlx::query_scalar(q::TABLE_EXISTS)
        .bind(format!("{}.outbox_wal", schema.name()))
        .fetch_one(&mut *conn)
        .await
        .map_err(Error::db("looking for the schema's replication slot"))?;
    if !has_table {
        return Ok(None);
    }
    recorded_slot(&mut *conn, schema).await
}

/// The content of the message a pause's change writes with the schema's
/// prefix (migration 17): the reader reads the pauses again from there on.
/// No event's message is this (each starts with its id).
pub(crate) const PAUSES_CHANGED: &str = "pauses";

/// The prefix of the schema's logical messages: the relay decodes only
/// messages that carry it, so schemas sharing a database never read each
/// other's events.
pub fn message_prefix(schema: &Schema) -> String {
    format!("outbox:{}", schema.name())
}

/// The slot (and publication) a schema gets unless another name is given:
/// `outbox_<schema>`.
pub fn default_slot_name(schema: &Schema) -> Result<String> {
    let name = format!("outbox_{}", schema.name());
    validate_slot_name(&name).map_err(|_| {
        Error::invalid(
            "slot",
            format!(
                "the default slot name {name} is longer than PostgreSQL's {MAX_SLOT_NAME} characters: name one with --slot (lowercase letters, digits, _)"
            ),
        )
    })?;
    Ok(name)
}

/// PostgreSQL's rule for slot names: 1 to 63 lowercase ASCII letters,
/// digits and `_`. The same name is used for the publication, which is then
/// never quoted.
pub fn validate_slot_name(name: &str) -> Result<()> {
    let valid = !name.is_empty()
        && name.len() <= MAX_SLOT_NAME
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    if valid {
        Ok(())
    } else {
        Err(Error::invalid(
            "slot",
            format!(
                "{} is not a replication slot name: use 1-{MAX_SLOT_NAME} lowercase letters, digits or _",
                crate::redact::quoted(name)
            ),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slot_names_follow_postgresqls_rule_and_default_from_the_schema() {
        assert_eq!(
            default_slot_name(&Schema::new("billing").unwrap()).unwrap(),
            "outbox_billing"
        );
        let long = Schema::new(&"s".repeat(60)).unwrap();
        let err = default_slot_name(&long).unwrap_err().to_string();
        assert!(err.contains("--slot"), "{err}");
        for bad in ["", "Upper", "with-dash", &"x".repeat(64)] {
            assert!(validate_slot_name(bad).is_err(), "{bad:?} was accepted");
        }
        assert!(validate_slot_name("outbox_2").is_ok());
    }

    #[test]
    fn modes_parse_by_name_and_refuse_others_naming_the_choices() {
        assert_eq!(DeliveryMode::parse("wal").unwrap(), DeliveryMode::Wal);
        assert_eq!(DeliveryMode::parse("table").unwrap(), DeliveryMode::Table);
        let err = DeliveryMode::parse("logical").unwrap_err().to_string();
        assert!(err.contains("use table or wal"), "{err}");
    }
}
