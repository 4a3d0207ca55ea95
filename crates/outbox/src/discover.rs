//! Finding the schemas a `schemas = "tenant_*"` source serves: a glob
//! pattern turned into a `LIKE` pattern, and the migrated schemas that
//! match it.
//!
//! A pattern is written with `*` (any run of characters, none included) and
//! `?` (exactly one character); every other character stands for itself, so
//! the `_` of `tenant_*` matches only `_`, never any character as it would
//! in `LIKE`. Patterns hold only `[A-Za-z0-9_*?$-]`: nothing that could
//! escape the pattern or the statement.

use sqlx::PgConnection;

use crate::error::{Error, Result};
use crate::queries as q;
use crate::schema::Schema;

/// Longest pattern accepted: a schema name is at most 63 characters, and a
/// pattern is rarely longer than the names it matches.
const MAX_PATTERN_CHARS: usize = 200;

/// The `LIKE` pattern (escape character `\`) for the glob `pattern`:
/// `tenant_*` → `tenant\_%`. `\`, `%` and `_` are escaped, `*` becomes `%`
/// and `?` becomes `_`. Refuses an empty pattern, a longer one than 200
/// characters and any character outside `[A-Za-z0-9_*?$-]`, with
/// [`Error::Invalid`] naming `schemas`.
pub fn pattern_to_like(pattern: &str) -> Result<String> {
    if pattern.is_empty() {
        return Err(Error::invalid(
            "schemas",
            "the pattern is empty: give a pattern such as tenant_* (* any run of characters, ? one character)",
        ));
    }
    if pattern.chars().count() > MAX_PATTERN_CHARS {
        return Err(Error::invalid(
            "schemas",
            format!(
                "{} is longer than {MAX_PATTERN_CHARS} characters: schema names have at most 63",
                crate::redact::quoted(pattern)
            ),
        ));
    }
    if let Some(bad) = pattern
        .chars()
        .find(|&c| !(c.is_ascii_alphanumeric() || "_*?$-".contains(c)))
    {
        return Err(Error::invalid(
            "schemas",
            format!(
                "{} holds {bad:?}: a pattern has letters, digits, _, $, - and the wildcards * (any run of characters) and ? (one character)",
                crate::redact::quoted(pattern)
            ),
        ));
    }
    let mut like = String::with_capacity(pattern.len() + 4);
    for c in pattern.chars() {
        match c {
            '\\' | '%' | '_' => {
                like.push('\\');
                like.push(c);
            }
            '*' => like.push('%'),
            '?' => like.push('_'),
            c => like.push(c),
        }
    }
    Ok(like)
}

/// The schemas whose name matches the glob `pattern` and that hold the
/// outbox tables (`outbox_events`), sorted by name, in one statement. A
/// schema created but not migrated yet is not matched; neither is a
/// matching name that is not a valid [`Schema`] (upper case, a keyword,
/// `pg_*`), which the outbox could not name in its statements: it is
/// logged and left out.
pub async fn schemas_matching(conn: &mut PgConnection, pattern: &str) -> Result<Vec<Schema>> {
    let like = pattern_to_like(pattern)?;
    let names: Vec<String> = sqlx::query_scalar(q::SCHEMAS_MATCHING)
        .bind(&like)
        .fetch_all(conn)
        .await
        .map_err(Error::db("finding the schemas matching a pattern"))?;
    Ok(names
        .into_iter()
        .filter_map(|name| match Schema::new(&name) {
            Ok(schema) => Some(schema),
            Err(e) => {
                tracing::warn!(
                    pattern,
                    schema = %crate::redact::quoted(&name),
                    error = %e,
                    "leaving out a schema that matches the pattern and holds outbox_events: its name cannot be used unquoted"
                );
                None
            }
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether `name` matches the `LIKE` pattern `like` (escape `\`), as
    /// PostgreSQL decides it, for the patterns [`pattern_to_like`] makes.
    fn like_matches(like: &str, name: &str) -> bool {
        fn go(p: &[char], s: &[char]) -> bool {
            match p.split_first() {
                None => s.is_empty(),
                Some(('%', rest)) => (0..=s.len()).any(|i| go(rest, &s[i..])),
                Some(('_', rest)) => !s.is_empty() && go(rest, &s[1..]),
                Some(('\\', rest)) => match (rest.split_first(), s.split_first()) {
                    (Some((c, rest)), Some((d, s))) => c == d && go(rest, s),
                    _ => false,
                },
                Some((c, rest)) => s.first() == Some(c) && go(rest, &s[1..]),
            }
        }
        let p: Vec<char> = like.chars().collect();
        let s: Vec<char> = name.chars().collect();
        go(&p, &s)
    }

    #[test]
    fn stars_and_question_marks_become_like_wildcards_and_underscores_are_escaped() {
        assert_eq!(pattern_to_like("tenant_*").unwrap(), r"tenant\_%");
        assert_eq!(pattern_to_like("t?_x").unwrap(), r"t_\_x");
        assert_eq!(pattern_to_like("*").unwrap(), "%");
        assert_eq!(pattern_to_like("a$b-c").unwrap(), "a$b-c");
    }

    #[test]
    fn an_underscore_in_a_pattern_matches_only_an_underscore() {
        let like = pattern_to_like("tenant_*").unwrap();
        assert!(like_matches(&like, "tenant_1x"));
        assert!(like_matches(&like, "tenant_"));
        assert!(!like_matches(&like, "tenantx1"));
        assert!(!like_matches(&like, "tenant"));
    }

    #[test]
    fn a_star_matches_any_run_and_a_question_mark_exactly_one_character() {
        let like = pattern_to_like("t?nant_*x").unwrap();
        assert!(like_matches(&like, "tenant_x"));
        assert!(like_matches(&like, "tanant_12x"));
        assert!(!like_matches(&like, "tnant_x"));
        assert!(!like_matches(&like, "teenant_x"));
        assert!(!like_matches(&like, "tenant_xy"));
    }

    #[test]
    fn empty_long_and_injection_like_patterns_are_refused_naming_schemas() {
        let long = "a".repeat(MAX_PATTERN_CHARS + 1);
        for bad in [
            "",
            "tenant_%",
            r"tenant\_*",
            "tenant'; DROP SCHEMA public; --",
            "a b",
            "tenant.*",
            "ten\"ant",
            "tenänt",
            "a\nb",
            long.as_str(),
        ] {
            let e = pattern_to_like(bad).unwrap_err();
            match &e {
                Error::Invalid { field, reason } => {
                    assert_eq!(field, "schemas", "{bad:?}");
                    assert!(!reason.is_empty(), "{bad:?}");
                }
                other => panic!("{bad:?}: {other}"),
            }
        }
    }
}
