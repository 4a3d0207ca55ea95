//! The configured schema that holds every outbox object.

use crate::error::{Error, Result};

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
    /// and `_`, not starting with a digit (so it never needs quoting).
    pub fn new(name: &str) -> Result<Self> {
        let ok = !name.is_empty()
            && name.len() <= 63
            && !name.starts_with(|c: char| c.is_ascii_digit())
            && name
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
        if ok {
            Ok(Schema(name.to_owned()))
        } else {
            Err(Error::invalid(
                "schema",
                format!(
                    "{name:?} is not a plain identifier: use 1-63 lowercase letters, digits or _, not starting with a digit"
                ),
            ))
        }
    }

    /// The schema name.
    pub fn name(&self) -> &str {
        &self.0
    }

    /// The notification channel the relay listens on for wake-ups. The
    /// `public` schema keeps the seed's channel name `outbox_event`.
    pub fn channel(&self) -> String {
        if self.0 == "public" {
            "outbox_event".to_owned()
        } else {
            format!("{}_outbox_event", self.0)
        }
    }

    /// Replaces `{schema}` in a SQL template with this schema's name.
    pub(crate) fn render(&self, sql: &str) -> String {
        sql.replace("{schema}", &self.0)
    }
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
    fn public_keeps_the_seed_channel() {
        assert_eq!(Schema::default().channel(), "outbox_event");
        assert_eq!(
            Schema::new("billing").unwrap().channel(),
            "billing_outbox_event"
        );
    }
}
