//! The `[[source]]` entries resolved ([`SourceEntry`]), which `outbox
//! relay`, `outbox status` and the dead-letter commands use. Every check of
//! an entry lives in [`Config::sources`], so `config check` and the
//! commands refuse the same entries with the same words.

use outbox::{RelayConfig, Schema};

use super::model::Config;
use super::publisher::PublisherConfig;
use super::sources::SourceConfig;
use crate::text::cut;

/// Which schemas of its database a source serves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SchemaSelector {
    /// This one schema (`schema = "orders"`).
    One(Schema),
    /// Every schema matching this glob pattern that holds the outbox
    /// tables (`schemas = "tenant_*"`); match it with
    /// [`outbox::discover::schemas_matching`]. The pattern was checked by
    /// [`outbox::discover::pattern_to_like`].
    Pattern(String),
}

/// A `[[source]]` entry resolved against the rest of the configuration:
/// everything needed to serve it.
#[derive(Debug, Clone, PartialEq)]
pub struct SourceEntry {
    /// The entry's name; a schema found by a pattern is the source
    /// `NAME/SCHEMA`.
    pub name: String,
    /// Its database: the entry's `database_url`, else the top-level one.
    pub database_url: String,
    /// The database that URL reaches, however it is spelled
    /// ([`crate::db::database_address`]).
    pub address: String,
    /// The schema or schemas it serves.
    pub schemas: SchemaSelector,
    /// `[relay]` with the entry's `batch_size` and `max_attempts` applied,
    /// checked by [`RelayConfig::validate`].
    pub relay: RelayConfig,
    /// The entry's `publisher`, else `[publisher]`.
    pub publisher: PublisherConfig,
}

impl SourceEntry {
    /// The source name of schema `schema` found by this entry's pattern
    /// (`tenants/tenant_7`); the entry's own name for a `schema` entry.
    pub fn source_name(&self, schema: &Schema) -> String {
        match &self.schemas {
            SchemaSelector::One(_) => self.name.clone(),
            SchemaSelector::Pattern(_) => format!("{}/{}", self.name, schema.name()),
        }
    }
}

/// A `[[source]]` entry refused: the key (`source[2].schema`) and what is
/// wrong, with the value and the fix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// The dotted key, `source[N].field` with N from 1.
    pub key: String,
    /// The value and the fix.
    pub reason: String,
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "invalid {}: {}", self.key, self.reason)
    }
}

impl std::error::Error for Refusal {}

/// Longest source name.
const MAX_NAME_CHARS: usize = 64;

impl Config {
    /// The `[[source]]` entries resolved: database URL defaulted, relay
    /// overrides applied and checked, publisher chosen. Empty without
    /// entries (the relay then serves `database_url` and `schema` as
    /// always). The first entry that cannot be served is refused, naming
    /// `source[N].field`, the value and the fix; a configuration that
    /// [`super::load`] returned has passed this already.
    pub fn sources(&self) -> Result<Vec<SourceEntry>, Refusal> {
        let mut out: Vec<SourceEntry> = Vec::with_capacity(self.source.len());
        for (i, s) in self.source.iter().enumerate() {
            let refuse = Refuse(i + 1);
            check_name(&s.name).map_err(|why| refuse.at("name", why))?;
            if let Some(first) = out.iter().position(|e| e.name == s.name) {
                return Err(refuse.at(
                    "name",
                    format!(
                        "{:?} is also the name of source[{}]: give every source its own name",
                        s.name,
                        first + 1
                    ),
                ));
            }
            let schemas = selector(s, refuse)?;
            let database_url = match s.database_url.as_ref().or(self.database_url.as_ref()) {
                Some(url) if !url.trim().is_empty() => url.clone(),
                _ => {
                    return Err(refuse.at(
                        "database_url",
                        format!(
                            "source {:?} has no database: set database_url in its [[source]] entry or the top-level database_url (postgres://USER:PASS@HOST:PORT/DB)",
                            s.name
                        ),
                    ))
                }
            };
            let options = crate::db::check_url(&database_url).map_err(|e| {
                refuse.at("database_url", crate::text::cut_words(&format!("{e:#}")))
            })?;
            let address = crate::db::database_address(&options);
            refuse_served_twice(&out, s, &schemas, &address, refuse)?;
            out.push(SourceEntry {
                name: s.name.clone(),
                database_url,
                address,
                schemas,
                relay: self.entry_relay(s, refuse)?,
                publisher: s
                    .publisher
                    .clone()
                    .unwrap_or_else(|| self.publisher.clone()),
            });
        }
        Ok(out)
    }

    /// `[relay]` with entry `s`'s overrides, checked (`[relay]` itself was
    /// checked: only an override can fail here).
    fn entry_relay(&self, s: &SourceConfig, refuse: Refuse) -> Result<RelayConfig, Refusal> {
        let mut relay = self.relay.clone();
        if let Some(batch_size) = s.batch_size {
            relay.batch_size = batch_size;
        }
        if let Some(max_attempts) = s.max_attempts {
            relay.max_attempts = max_attempts;
        }
        relay.validate().map_err(|e| match e {
            outbox::Error::Invalid { field, reason } => refuse.at(&field, reason),
            other => refuse.at("relay", other.to_string()),
        })?;
        Ok(relay)
    }
}

/// Refusals of entry N (from 1): `source[N].field`.
#[derive(Clone, Copy)]
struct Refuse(usize);

impl Refuse {
    fn at(self, field: &str, reason: String) -> Refusal {
        Refusal {
            key: format!("source[{}].{field}", self.0),
            reason,
        }
    }
}

/// Entry `s`'s schema or pattern: exactly one of the two, valid.
fn selector(s: &SourceConfig, refuse: Refuse) -> Result<SchemaSelector, Refusal> {
    match (&s.schema, &s.schemas) {
        (Some(one), Some(pattern)) => Err(refuse.at(
            "schema",
            format!(
                "both schema = {} and schemas = {} are set: keep schema for one schema, or schemas for a pattern",
                cut(one),
                cut(pattern)
            ),
        )),
        (None, None) => Err(refuse.at(
            "schema",
            format!(
                "source {:?} names no schema: set schema = \"public\" (one schema) or schemas = \"tenant_*\" (every matching schema)",
                s.name
            ),
        )),
        (Some(one), None) => Ok(SchemaSelector::One(
            Schema::new(one).map_err(|e| refuse.at("schema", reason_of(e)))?,
        )),
        (None, Some(pattern)) => {
            outbox::discover::pattern_to_like(pattern)
                .map_err(|e| refuse.at("schemas", reason_of(e)))?;
            Ok(SchemaSelector::Pattern(pattern.to_string()))
        }
    }
}

/// One schema of one database (however its URL is spelled) is one source:
/// a second entry for it would deliver every event twice.
fn refuse_served_twice(
    out: &[SourceEntry],
    s: &SourceConfig,
    schemas: &SchemaSelector,
    address: &str,
    refuse: Refuse,
) -> Result<(), Refusal> {
    let SchemaSelector::One(schema) = schemas else {
        return Ok(());
    };
    let Some(first) = out
        .iter()
        .position(|e| e.address == address && e.schemas == SchemaSelector::One(schema.clone()))
    else {
        return Ok(());
    };
    Err(refuse.at(
        "schema",
        format!(
            "source {:?} and source[{}] {:?} both serve schema {} of the database at {address}: one schema is one source, or every event is delivered twice; remove one of the two entries",
            s.name,
            first + 1,
            out[first].name,
            schema.name()
        ),
    ))
}

/// The reason of the library's [`outbox::Error::Invalid`], else its text.
fn reason_of(e: outbox::Error) -> String {
    match e {
        outbox::Error::Invalid { reason, .. } => reason,
        other => other.to_string(),
    }
}

/// 1 to 64 characters of `[A-Za-z0-9_.-]`: names go into metric labels,
/// log fields and `--source`, and `/` separates a pattern entry's name
/// from a schema it found.
fn check_name(name: &str) -> Result<(), String> {
    let fix = "use 1 to 64 letters, digits, _, . or -, e.g. orders";
    if name.is_empty() {
        return Err(format!("the name is empty: {fix}"));
    }
    if name.chars().count() > MAX_NAME_CHARS {
        return Err(format!(
            "{} is longer than {MAX_NAME_CHARS} characters: {fix}",
            cut(name)
        ));
    }
    if let Some(c) = name
        .chars()
        .find(|&c| !(c.is_ascii_alphanumeric() || "_.-".contains(c)))
    {
        return Err(format!("{} holds {c:?}: {fix}", cut(name)));
    }
    Ok(())
}
