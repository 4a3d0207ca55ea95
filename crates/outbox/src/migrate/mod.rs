//! Embedded, idempotent migrations.

use sqlx::{Connection, PgConnection};

use crate::error::{Error, Result};
use crate::queries as q;
use crate::schema::Schema;
use crate::wal::{self, DeliveryMode};

mod delivery;
mod versions;
mod wakeup;

pub(crate) use delivery::installed_delivery;
pub use wakeup::WakeupTrigger;

/// Default number of ownership partitions.
pub const DEFAULT_PARTITIONS: u32 = 32;
/// Most ownership partitions a schema may have.
pub const MAX_PARTITIONS: u32 = 1024;

/// What [`migrate`] should do.
#[derive(Debug, Clone, Default)]
pub struct MigrateOptions {
    /// Ownership partitions for a new schema (default 32). Fixed once the
    /// schema exists; asking for another number on an existing schema is an
    /// error.
    pub partitions: Option<u32>,
    /// `Some(true)` installs the seed's per-row NOTIFY trigger (compatibility
    /// mode, slows producers), `Some(false)` removes it (back to
    /// [`WakeupTrigger::Idle`]), `None` leaves it. [`MigrateOptions::wakeup`]
    /// wins when both are given.
    pub notify_trigger: Option<bool>,
    /// The wake-up trigger to install; `None` leaves the schema's choice (a
    /// new schema gets [`WakeupTrigger::Idle`]).
    pub wakeup: Option<WakeupTrigger>,
    /// The delivery mode to switch to; `None` leaves the schema's (a new
    /// schema gets [`DeliveryMode::Table`]). Switching to
    /// [`DeliveryMode::Wal`] first checks the server (refusing, with
    /// nothing changed, what the mode cannot run on), then creates the
    /// publication and the logical slot, then installs the mode's
    /// `outbox_emit`; switching back leaves the slot for the relay to
    /// finish reading.
    pub mode: Option<DeliveryMode>,
    /// The WAL mode's replication slot (and publication) name; default
    /// the one the schema already records, else `outbox_<schema>` (or
    /// `outbox_<database>_<schema>` when another database of the server
    /// has a slot of that name). Only read when switching to the WAL mode.
    pub slot: Option<String>,
    /// Takes [`MigrateOptions::slot`] although the outbox did not create
    /// it: the relay will read it from its confirmed position, confirm past
    /// every message that is not this schema's, and drop it at a switch
    /// back to the table mode. Another schema's slot is refused always.
    pub adopt_slot: bool,
    /// How long a switch back to the table mode waits for the transactions
    /// older than it to end (default
    /// [`DEFAULT_SWITCH_TIMEOUT`](crate::DEFAULT_SWITCH_TIMEOUT)); past it
    /// the switch stays in progress and running it again resumes the wait.
    pub switch_timeout: Option<std::time::Duration>,
}

/// What [`migrate`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MigrationReport {
    /// Names of the migrations applied by this call (empty when up to date).
    pub applied: Vec<String>,
    /// The schema's partition count.
    pub partitions: u32,
    /// Whether the seed's per-row NOTIFY trigger is installed after this
    /// call.
    pub notify_trigger: bool,
    /// The wake-up trigger installed after this call.
    pub wakeup: WakeupTrigger,
    /// The delivery mode after this call.
    pub mode: DeliveryMode,
    /// The slot the WAL mode is (or was last) read through, if the schema
    /// has ever been in it.
    pub slot: Option<String>,
    /// Whether this call created the slot.
    pub slot_created: bool,
    /// What the operator must know about this call's switch of mode (a
    /// slot found gone, say), one sentence each.
    pub warnings: Vec<String>,
}

/// Applies the outbox migrations to `schema`, in one transaction, under an
/// advisory lock so concurrent callers do not race. Running it twice is a
/// no-op. In order: the numbered migrations ([`versions`]), the wake-up
/// triggers the schema's mode asks for ([`wakeup`]), then the delivery
/// mode's switch, if one is asked for ([`delivery`]): its part inside the
/// transaction, then what must wait for the commit.
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
    let mut warnings = Vec::new();
    let slot = match options.mode {
        Some(DeliveryMode::Wal) => {
            Some(delivery::prepare_wal(conn, schema, options, &mut warnings).await?)
        }
        _ => None,
    };
    let leaving = delivery::leaving_wal(conn, schema, options).await?;
    let mut tx = conn
        .begin()
        .await
        .map_err(Error::db("starting migration"))?;
    sqlx::query(q::MIGRATION_LOCK)
        .bind(schema.name())
        .execute(&mut *tx)
        .await
        .map_err(Error::db("locking for migration"))?;
    let done = versions::applied(&mut tx, schema).await?;
    versions::check_partitions(&mut tx, schema, &done, options.partitions).await?;
    let applied = versions::apply(&mut tx, schema, &done, partitions).await?;
    wakeup::reconcile(
        &mut tx,
        schema,
        options.wakeup,
        options.notify_trigger,
        &applied,
    )
    .await?;
    delivery::in_transaction(&mut tx, schema, options, &leaving, &applied).await?;
    let partitions = versions::partition_count(&mut tx, schema).await?;
    let wakeup = wakeup::installed_mode(&mut tx, schema).await?;
    if !applied.is_empty() {
        // Relays serving a pattern of schemas look for this one now, at
        // the commit, rather than at their next rescan.
        sqlx::query(q::SCHEMAS_CHANGED_NOTIFY)
            .bind(schema.name())
            .execute(&mut *tx)
            .await
            .map_err(Error::db("announcing the migrated schema"))?;
    }
    tx.commit()
        .await
        .map_err(Error::db("committing migration"))?;
    delivery::after_commit(conn, schema, options, &leaving, &mut warnings).await?;
    let slot_created = match &slot {
        Some(slot) => delivery::switch_to_wal(conn, schema, slot).await?,
        None => false,
    };
    let mode = delivery::installed_delivery(conn, schema).await?;
    let slot = wal::recorded_slot(&mut *conn, schema)
        .await?
        .map(|(slot, _)| slot);
    Ok(MigrationReport {
        applied,
        partitions: partitions as u32,
        notify_trigger: wakeup == WakeupTrigger::EveryInsert,
        wakeup,
        mode,
        slot,
        slot_created,
        warnings,
    })
}

/// Fails with [`Error::NotMigrated`] unless `schema` holds the outbox tables
/// and the functions the relay calls.
pub async fn ensure_migrated(conn: &mut PgConnection, schema: &Schema) -> Result<()> {
    // The tables, and the function every claim computes a row's partition
    // with (migration 11).
    let needed = [
        (q::TABLE_EXISTS, "table", "outbox_events"),
        (q::TABLE_EXISTS, "table", "outbox_partitions"),
        (q::TABLE_EXISTS, "table", "outbox_relay_instances"),
        (q::TABLE_EXISTS, "table", "outbox_relay_idle_until"),
        (q::TABLE_EXISTS, "table", "outbox_pauses"),
        (q::FUNCTION_EXISTS, "function", "outbox_partition(text)"),
    ];
    for (exists_sql, kind, name) in needed {
        let exists: bool = sqlx::query_scalar(exists_sql)
            .bind(format!("{}.{name}", schema.name()))
            .fetch_one(&mut *conn)
            .await
            .map_err(Error::db("checking the schema"))?;
        if !exists {
            return Err(Error::NotMigrated {
                schema: schema.name().to_owned(),
                table: format!("{kind} {name}"),
            });
        }
    }
    Ok(())
}
