//! The configured schema that holds every outbox object.

use crate::error::{Error, Result};

/// Longest identifier PostgreSQL keeps (`NAMEDATALEN - 1`).
const MAX_LEN: usize = 63;

/// Every PostgreSQL 15 keyword that is not "unreserved" (`pg_get_keywords()`
/// categories R, T and C): the words `quote_ident` would quote. Unquoted,
/// each is a syntax error or a different meaning in some statement the
/// outbox renders, so none is accepted as a schema name. Sorted, for the
/// binary search.
#[rustfmt::skip]
const KEYWORDS: &[&str] = &[
    "all", "analyse", "analyze", "and", "any", "array", "as", "asc", "asymmetric",
    "authorization", "between", "bigint", "binary", "bit", "boolean", "both", "case", "cast",
    "char", "character", "check", "coalesce", "collate", "collation", "column", "concurrently",
    "constraint", "create", "cross", "current_catalog", "current_date", "current_role",
    "current_schema", "current_time", "current_timestamp", "current_user", "dec", "decimal",
    "default", "deferrable", "desc", "distinct", "do", "else", "end", "except", "exists",
    "extract", "false", "fetch", "float", "for", "foreign", "freeze", "from", "full", "grant",
    "greatest", "group", "grouping", "having", "ilike", "in", "initially", "inner", "inout",
    "int", "integer", "intersect", "interval", "into", "is", "isnull", "join", "lateral",
    "leading", "least", "left", "like", "limit", "localtime", "localtimestamp", "national",
    "natural", "nchar", "none", "normalize", "not", "notnull", "null", "nullif", "numeric",
    "offset", "on", "only", "or", "order", "out", "outer", "overlaps", "overlay", "placing",
    "position", "precision", "primary", "real", "references", "returning", "right", "row",
    "select", "session_user", "setof", "similar", "smallint", "some", "substring", "symmetric",
    "table", "tablesample", "then", "time", "timestamp", "to", "trailing", "treat", "trim",
    "true", "union", "unique", "user", "using", "values", "varchar", "variadic", "verbose",
    "when", "where", "window", "with", "xmlattributes", "xmlconcat", "xmlelement", "xmlexists",
    "xmlforest", "xmlnamespaces", "xmlparse", "xmlpi", "xmlroot", "xmlserialize", "xmltable",
];

/// A validated PostgreSQL schema name; every table, view and function of the
/// outbox lives in it. The default is `public`, so the seed's plain SQL
/// (`INSERT INTO outbox_events …`) works unqualified.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Schema(String);

impl Default for Schema {
    fn default() -> Self {
        Schema("public".to_owned())
    }
}

impl Schema {
    /// Validates `name`: 1 to 63 characters, lowercase ASCII letters, digits
    /// and `_`, not starting with a digit, not a PostgreSQL keyword (so it
    /// never needs quoting), and not a system schema (`pg_*`,
    /// `information_schema`), which `pg_dump` leaves out of backups. The
    /// error quotes at most the first 60 characters of `name`.
    pub fn new(name: &str) -> Result<Self> {
        let invalid = |reason: String| Err(Error::invalid("schema", reason));
        if name.is_empty() {
            return invalid(
                "the name is empty: give a schema name such as public, or leave the setting out for public"
                    .to_owned(),
            );
        }
        let plain = name.len() <= MAX_LEN
            && !name.starts_with(|c: char| c.is_ascii_digit())
            && name
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
        if !plain {
            return invalid(format!(
                "{} is not a plain identifier: use 1-63 lowercase letters, digits or _, not starting with a digit",
                crate::redact::quoted(name)
            ));
        }
        if KEYWORDS.binary_search(&name).is_ok() {
            return invalid(format!(
                "{name:?} is a PostgreSQL keyword and would need quoting in SQL: use another name, e.g. {name}_outbox"
            ));
        }
        if name.starts_with("pg_") {
            return invalid(format!(
                "{name:?} starts with pg_, which PostgreSQL reserves for system schemas (pg_catalog, pg_toast, …); pg_dump leaves system schemas out, so backups would silently miss the outbox: use another name, e.g. outbox"
            ));
        }
        if name == "information_schema" {
            return invalid(format!(
                "{name:?} is a system schema; pg_dump leaves system schemas out, so backups would silently miss the outbox: use another name, e.g. outbox"
            ));
        }
        Ok(Schema(name.to_owned()))
    }

    /// The schema name.
    pub fn name(&self) -> &str {
        &self.0
    }

    /// The notification channel the relay listens on for wake-ups; always
    /// at most 63 bytes, the longest channel name `pg_notify` takes. The
    /// `public` schema keeps the seed's channel name `outbox_event`; a
    /// schema of up to 50 characters is `<schema>_outbox_event`; a longer
    /// one is its first 41 characters, `_`, 8 hex digits of a hash of the
    /// whole name, then `_outbox_event` (two long names that share their
    /// first 41 characters still get different channels).
    pub fn channel(&self) -> String {
        const SUFFIX: &str = "_outbox_event";
        if self.0 == "public" {
            "outbox_event".to_owned()
        } else if self.0.len() + SUFFIX.len() <= MAX_LEN {
            format!("{}{SUFFIX}", self.0)
        } else {
            let keep = MAX_LEN - SUFFIX.len() - 9;
            format!("{}_{:08x}{SUFFIX}", &self.0[..keep], short_hash(&self.0))
        }
    }

    /// Replaces `{schema}` in a SQL template with this schema's name.
    pub(crate) fn render(&self, sql: &str) -> String {
        sql.replace("{schema}", &self.0)
    }
}

/// 32 bits of the FNV-1a hash of `name`: stable across builds and
/// platforms, so a relay and the triggers a migration rendered derive the
/// same channel.
fn short_hash(name: &str) -> u32 {
    let mut h: u32 = 0x811c_9dc5;
    for b in name.bytes() {
        h ^= u32::from(b);
        h = h.wrapping_mul(0x0100_0193);
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_plain_identifiers_and_rejects_the_rest() {
        assert!(Schema::new("outbox_1").is_ok());
        for bad in ["", "1abc", "Public", "a-b", "a;drop", &"x".repeat(64)] {
            let err = Schema::new(bad).unwrap_err().to_string();
            assert!(err.contains("schema"), "{err}");
        }
    }

    #[test]
    fn keywords_and_system_prefixes_are_refused_with_the_fix() {
        for word in ["select", "user", "table", "order", "left", "int", "values"] {
            let err = Schema::new(word).unwrap_err().to_string();
            assert!(
                err.contains(&format!("{word:?}"))
                    && err.contains("keyword")
                    && err.contains("use another name"),
                "{err}"
            );
        }
        let err = Schema::new("pg_outbox").unwrap_err().to_string();
        assert!(
            err.contains("pg_") && err.contains("use another name"),
            "{err}"
        );
        // Unreserved keywords and names merely containing a keyword are fine.
        for ok in [
            "public",
            "billing",
            "action",
            "selects",
            "user_events",
            "outbox",
        ] {
            assert!(Schema::new(ok).is_ok(), "{ok}");
        }
    }

    #[test]
    fn system_schemas_are_refused_because_backups_leave_them_out() {
        for name in ["pg_catalog", "pg_toast", "pg_temp_1", "information_schema"] {
            let err = Schema::new(name).unwrap_err().to_string();
            assert!(
                err.contains(&format!("{name:?}"))
                    && err.contains("system schema")
                    && err.contains("pg_dump")
                    && err.contains("use another name"),
                "{err}"
            );
        }
        assert!(Schema::new("information_schema_copy").is_ok());
    }

    #[test]
    fn the_keyword_list_is_sorted_for_the_binary_search() {
        assert!(KEYWORDS.windows(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn empty_and_long_names_are_explained_not_echoed() {
        let err = Schema::new("").unwrap_err().to_string();
        assert!(err.contains("empty") && err.contains("public"), "{err}");
        let long = "x".repeat(10 * 1024 * 1024);
        let err = Schema::new(&long).unwrap_err().to_string();
        assert!(err.len() < 300, "{} bytes", err.len());
        assert!(
            err.contains("10485760 bytes") && err.contains("1-63"),
            "{err}"
        );
    }

    #[test]
    fn public_keeps_the_seed_channel() {
        assert_eq!(Schema::default().channel(), "outbox_event");
        assert_eq!(
            Schema::new("billing").unwrap().channel(),
            "billing_outbox_event"
        );
    }

    #[test]
    fn every_accepted_name_has_a_channel_that_fits() {
        for len in 1..=MAX_LEN {
            let schema = Schema::new(&"t".repeat(len)).unwrap();
            let channel = schema.channel();
            assert!(channel.len() <= MAX_LEN, "{len}: {channel}");
            assert!(channel.ends_with("outbox_event"), "{channel}");
        }
        assert_eq!(
            Schema::new(&"a".repeat(50)).unwrap().channel(),
            format!("{}_outbox_event", "a".repeat(50))
        );
        // Names sharing their first 41 characters stay apart.
        let a = Schema::new(&format!("{}_one", "x".repeat(55))).unwrap();
        let b = Schema::new(&format!("{}_two", "x".repeat(55))).unwrap();
        assert_ne!(a.channel(), b.channel());
        assert_eq!(a.channel().len(), MAX_LEN);
        // The derivation is fixed: a relay and the triggers agree across builds.
        assert_eq!(short_hash(""), 0x811c_9dc5);
        assert_eq!(short_hash("a"), 0xe40c_292c);
    }
}
