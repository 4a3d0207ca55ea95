//! The migration runner's statements (`migrate`, `ensure_migrated`). The
//! migrations themselves are `.sql` files in `crates/outbox/migrations/`.

/// Serialises migrations of schema `$1` (released at commit).
pub const MIGRATION_LOCK: &str = "SELECT pg_advisory_xact_lock(hashtext('outbox.migrate.' || $1))";

/// The schema and its table of applied migrations, before the first one.
pub const MIGRATION_TABLE_CREATE: &str = "CREATE SCHEMA IF NOT EXISTS {schema};
CREATE TABLE IF NOT EXISTS {schema}.outbox_schema_migrations (
    version    INT PRIMARY KEY,
    name       TEXT NOT NULL,
    applied_at TIMESTAMPTZ NOT NULL DEFAULT NOW());";

/// The versions applied so far, in order.
pub const MIGRATION_APPLIED: &str =
    "SELECT version FROM {schema}.outbox_schema_migrations ORDER BY version";

/// Records migration `$1` named `$2` as applied.
pub const MIGRATION_RECORD: &str =
    "INSERT INTO {schema}.outbox_schema_migrations (version, name) VALUES ($1, $2)";

/// The schema's partition count, as `bigint` (the relay's
/// `PARTITION_COUNT` reads it as `int`).
pub const MIGRATION_PARTITION_COUNT: &str = "SELECT count(*) FROM {schema}.outbox_partitions";

/// The wake-up triggers installed on schema `$1`'s outbox table, by name.
pub const WAKEUP_TRIGGERS_INSTALLED: &str = "
SELECT t.tgname::text FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
  JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE t.tgname IN ('outbox_insert_notify', 'outbox_wake_idle_relay')
   AND n.nspname = $1 AND c.relname = 'outbox_events'";

/// Whether table `$1` (schema-qualified) exists.
pub const TABLE_EXISTS: &str = "SELECT to_regclass($1) IS NOT NULL";

/// Whether function `$1` (schema-qualified, with its argument types)
/// exists.
pub const FUNCTION_EXISTS: &str = "SELECT to_regprocedure($1) IS NOT NULL";

/// The idle wake-up trigger. Its function (migration 9) takes the
/// transaction id before any row draws its seq, in place of
/// `outbox_xid_first`, and sends the NOTIFY only while a relay sleeps; it
/// has no `WHEN`, which PostgreSQL would parse again at every statement.
pub const IDLE_TRIGGER_ON: &str = "
DROP TRIGGER IF EXISTS outbox_wake_idle_relay ON {schema}.outbox_events;
CREATE TRIGGER outbox_wake_idle_relay
BEFORE INSERT ON {schema}.outbox_events
FOR EACH STATEMENT
EXECUTE FUNCTION {schema}.outbox_wake_idle_relay();
DROP TRIGGER IF EXISTS outbox_xid_first ON {schema}.outbox_events;";

/// No idle wake-up trigger; `outbox_xid_first` (migrations 4 and 7) takes
/// the transaction id first instead, in its `WHEN`.
pub const IDLE_TRIGGER_OFF: &str = "
DROP TRIGGER IF EXISTS outbox_wake_idle_relay ON {schema}.outbox_events;
DROP TRIGGER IF EXISTS outbox_xid_first ON {schema}.outbox_events;
CREATE TRIGGER outbox_xid_first
BEFORE INSERT ON {schema}.outbox_events
FOR EACH STATEMENT WHEN (pg_current_xact_id() IS NULL)
EXECUTE FUNCTION {schema}.outbox_xid_first();";
