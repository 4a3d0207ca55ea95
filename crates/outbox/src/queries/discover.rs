//! Schema discovery's statement (`schemas = "tenant_*"` sources).

/// The schemas whose name matches the `LIKE` pattern `$1` (escape
/// character `\`) and that hold an `outbox_events` table, sorted by name in
/// byte order. The table is looked up in the catalogue, not through
/// `to_regclass`, so a schema the role may not use is matched (and then
/// reported by the relay that serves it) instead of failing the whole scan;
/// a schema created but not yet migrated is not matched.
pub const SCHEMAS_MATCHING: &str = r#"
SELECT n.nspname::text
FROM pg_catalog.pg_namespace n
WHERE n.nspname LIKE $1 ESCAPE '\'
  AND EXISTS (SELECT 1 FROM pg_catalog.pg_class c
              WHERE c.relnamespace = n.oid
                AND c.relname = 'outbox_events'
                AND c.relkind IN ('r', 'p'))
ORDER BY n.nspname COLLATE "C""#;
