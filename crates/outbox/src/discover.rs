//! Finding schemas by a pattern (placeholder until the full module lands).

use sqlx::PgConnection;

use crate::error::{Error, Result};
use crate::schema::Schema;

/// A `*`/`?` pattern as a `LIKE` pattern.
pub fn pattern_to_like(pattern: &str) -> Result<String> {
    if pattern.is_empty() {
        return Err(Error::invalid("schemas", "the pattern is empty".to_owned()));
    }
    let mut like = String::new();
    for c in pattern.chars() {
        match c {
            '*' => like.push('%'),
            '?' => like.push('_'),
            '_' | '%' | '\\' => {
                like.push('\\');
                like.push(c);
            }
            c if c.is_ascii_alphanumeric() || c == '$' || c == '-' => like.push(c),
            c => {
                return Err(Error::invalid(
                    "schemas",
                    format!("{c:?} is not allowed in a pattern"),
                ))
            }
        }
    }
    Ok(like)
}

/// Schemas matching `pattern` that hold `outbox_events`, sorted.
pub async fn schemas_matching(conn: &mut PgConnection, pattern: &str) -> Result<Vec<Schema>> {
    let like = pattern_to_like(pattern)?;
    let names: Vec<String> = sqlx::query_scalar(
        "SELECT nspname::text FROM pg_namespace WHERE nspname LIKE $1 \
         AND to_regclass(quote_ident(nspname) || '.outbox_events') IS NOT NULL ORDER BY 1",
    )
    .bind(like)
    .fetch_all(conn)
    .await
    .map_err(Error::db("matching schemas"))?;
    Ok(names.iter().filter_map(|n| Schema::new(n).ok()).collect())
}
