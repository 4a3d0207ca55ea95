//! Embedded, idempotent migrations.

use sqlx::{Connection, PgConnection};

use crate::error::{Error, Result};
use crate::schema::Schema;

/// Default number of ownership partitions.
pub const DEFAULT_PARTITIONS: u32 = 32;
/// Most ownership partitions a schema may have.
pub const MAX_PARTITIONS: u32 = 1024;

/// The migrations, in order. Each is applied once and recorded in
/// `{schema}.outbox_schema_migrations`; each is also written to be
/// harmless if applied again.
const MIGRATIONS: &[(i32, &str, &str)] = &[
    (1, "outbox", include_str!("../migrations/0001_outbox.sql")),
    (
        2,
        "finite_timestamps",
        include_str!("../migrations/0002_finite_timestamps.sql"),
    ),
];

const TRIGGER_ON: &str = include_str!("../migrations/notify_trigger_on.sql");
const TRIGGER_OFF: &str = include_str!("../migrations/notify_trigger_off.sql");

/// What [`migrate`] should do.
#[derive(Debug, Clone, Default)]
pub struct MigrateOptions {
    /// Ownership partitions for a new schema (default 32). Fixed once the
    /// schema exists; asking for another number on an existing schema is an
    /// error.
    pub partitions: Option<u32>,
    /// `Some(true)` installs the seed's per-row NOTIFY trigger (compatibility
    /// mode, slows producers), `Some(false)` removes it, `None` leaves it.
    pub notify_trigger: Option<bool>,
}

/// What [`migrate`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MigrationReport {
    /// Names of the migrations applied by this call (empty when up to date).
    pub applied: Vec<String>,
    /// The schema's partition count.
    pub partitions: u32,
    /// Whether the NOTIFY trigger is installed after this call.
    pub notify_trigger: bool,
}

/// Applies the outbox migrations to `schema`, in one transaction, under an
/// advisory lock so concurrent callers do not race. Running it twice is a
/// no-op.
pub async fn migrate(
    conn: &mut PgConnection,
    schema: &Schema,
    options: &MigrateOptions,
) -> Result<MigrationReport> {
    let partitions = options.partitions.unwrap_or(DEFAULT_PARTITIONS);
    if partitions == 0 || partitions > MAX_PARTITIONS {
        return Err(Error::invalid(
            "partitions",
            format!("{partitions} is out of range: use 1 to {MAX_PARTITIONS}"),
        ));
    }
    let mut tx = conn
        .begin()
        .await
        .map_err(Error::db("starting migration"))?;
    sqlx::query("SELECT pg_advisory_xact_lock(hashtext('outbox.migrate.' || $1))")
        .bind(schema.name())
        .execute(&mut *tx)
        .await
        .map_err(Error::db("locking for migration"))?;
    let setup = schema.render(
        "CREATE SCHEMA IF NOT EXISTS {schema};
         CREATE TABLE IF NOT EXISTS {schema}.outbox_schema_migrations (
             version    INT PRIMARY KEY,
             name       TEXT NOT NULL,
             applied_at TIMESTAMPTZ NOT NULL DEFAULT NOW());",
    );
    sqlx::raw_sql(&setup)
        .execute(&mut *tx)
        .await
        .map_err(Error::db("creating the migrations table"))?;
    let done: Vec<i32> = sqlx::query_scalar(
        &schema.render("SELECT version FROM {schema}.outbox_schema_migrations ORDER BY version"),
    )
    .fetch_all(&mut *tx)
    .await
    .map_err(Error::db("reading applied migrations"))?;

    if done.contains(&1) {
        let existing: i64 =
            sqlx::query_scalar(&schema.render("SELECT count(*) FROM {schema}.outbox_partitions"))
                .fetch_one(&mut *tx)
                .await
                .map_err(Error::db("reading the partition count"))?;
        if let Some(wanted) = options.partitions {
            if i64::from(wanted) != existing {
                return Err(Error::invalid(
                    "partitions",
                    format!(
                        "schema {} already has {existing} partitions, not {wanted}; the count is fixed once created (use a new schema to change it)",
                        schema.name()
                    ),
                ));
            }
        }
    }

    let mut applied = Vec::new();
    for (version, name, sql) in MIGRATIONS {
        if done.contains(version) {
            continue;
        }
        let sql = schema
            .render(sql)
            .replace("{partitions}", &partitions.to_string());
        sqlx::raw_sql(&sql)
            .execute(&mut *tx)
            .await
            .map_err(Error::db("applying a migration"))?;
        sqlx::query(&schema.render(
            "INSERT INTO {schema}.outbox_schema_migrations (version, name) VALUES ($1, $2)",
        ))
        .bind(version)
        .bind(name)
        .execute(&mut *tx)
        .await
        .map_err(Error::db("recording a migration"))?;
        applied.push(format!("{version:04}_{name}"));
    }

    if let Some(on) = options.notify_trigger {
        let sql = schema
            .render(if on { TRIGGER_ON } else { TRIGGER_OFF })
            .replace("{channel}", &schema.channel());
        sqlx::raw_sql(&sql)
            .execute(&mut *tx)
            .await
            .map_err(Error::db("changing the notify trigger"))?;
    }
    let partitions: i64 =
        sqlx::query_scalar(&schema.render("SELECT count(*) FROM {schema}.outbox_partitions"))
            .fetch_one(&mut *tx)
            .await
            .map_err(Error::db("reading the partition count"))?;
    let notify_trigger: bool = sqlx::query_scalar(
        "SELECT EXISTS (SELECT 1 FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
           JOIN pg_namespace n ON n.oid = c.relnamespace
          WHERE t.tgname = 'outbox_insert_notify' AND n.nspname = $1)",
    )
    .bind(schema.name())
    .fetch_one(&mut *tx)
    .await
    .map_err(Error::db("reading the notify trigger"))?;
    tx.commit()
        .await
        .map_err(Error::db("committing migration"))?;
    Ok(MigrationReport {
        applied,
        partitions: partitions as u32,
        notify_trigger,
    })
}

/// Fails with [`Error::NotMigrated`] unless `schema` holds the outbox tables.
pub async fn ensure_migrated(conn: &mut PgConnection, schema: &Schema) -> Result<()> {
    for table in [
        "outbox_events",
        "outbox_partitions",
        "outbox_relay_instances",
    ] {
        let exists: bool = sqlx::query_scalar("SELECT to_regclass($1) IS NOT NULL")
            .bind(format!("{}.{table}", schema.name()))
            .fetch_one(&mut *conn)
            .await
            .map_err(Error::db("checking the schema"))?;
        if !exists {
            return Err(Error::NotMigrated {
                schema: schema.name().to_owned(),
                table: table.to_owned(),
            });
        }
    }
    Ok(())
}
