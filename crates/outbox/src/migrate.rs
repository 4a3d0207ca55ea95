//! Embedded, idempotent migrations.

use sqlx::{Connection, PgConnection};

use crate::error::{Error, Result};
use crate::queries as q;
use crate::schema::Schema;
use crate::wal::switch_back::{self, SlotHealth};
use crate::wal::{self, DeliveryMode};

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
    (
        3,
        "idle_wakeup",
        include_str!("../migrations/0003_idle_wakeup.sql"),
    ),
    (
        4,
        "xid_first",
        include_str!("../migrations/0004_xid_first.sql"),
    ),
    (
        5,
        "retry_index",
        include_str!("../migrations/0005_retry_index.sql"),
    ),
    (
        6,
        "one_wakeup_trigger",
        include_str!("../migrations/0006_one_wakeup_trigger.sql"),
    ),
    (
        7,
        "idle_flag_in_a_sequence",
        include_str!("../migrations/0007_idle_flag_in_a_sequence.sql"),
    ),
    (
        8,
        "seq_always_positive",
        include_str!("../migrations/0008_seq_always_positive.sql"),
    ),
    (
        9,
        "cheaper_inserts",
        include_str!("../migrations/0009_cheaper_inserts.sql"),
    ),
    (10, "pause", include_str!("../migrations/0010_pause.sql")),
    (
        11,
        "partition_function_and_row_checks",
        include_str!("../migrations/0011_partition_function_and_row_checks.sql"),
    ),
    (
        12,
        "dead_letter_index",
        include_str!("../migrations/0012_dead_letter_index.sql"),
    ),
    (13, "emit", include_str!("../migrations/0013_emit.sql")),
    (
        14,
        "wal_switch_mark",
        include_str!("../migrations/0014_wal_switch_mark.sql"),
    ),
    (
        15,
        "pauses_notify",
        include_str!("../migrations/0015_pauses_notify.sql"),
    ),
    (
        16,
        "channel_names_fit",
        include_str!("../migrations/0016_channel_names_fit.sql"),
    ),
    (
        17,
        "pauses_in_the_stream",
        include_str!("../migrations/0017_pauses_in_the_stream.sql"),
    ),
];

const TRIGGER_ON: &str = include_str!("../migrations/notify_trigger_on.sql");
const TRIGGER_OFF: &str = include_str!("../migrations/notify_trigger_off.sql");
const WAL_MODE_ON: &str = include_str!("../migrations/wal_mode_on.sql");
const WAL_MODE_OFF: &str = include_str!("../migrations/wal_mode_off.sql");

/// How rows inserted by plain SQL wake a relay in another process.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum WakeupTrigger {
    /// The default: one `NOTIFY` per inserting statement, and only while a
    /// relay has announced it is idle. Costs producers nothing while relays
    /// are busy; the first event after a quiet spell is picked up at once.
    #[default]
    Idle,
    /// The seed's trigger: a `NOTIFY` for every inserted row, busy or not.
    /// Every committing producer then takes PostgreSQL's global notify lock
    /// (measured: about a third of producer throughput at 8 producers).
    EveryInsert,
    /// No trigger: relays find plain-SQL rows at their next poll (or when a
    /// library producer calls `Outbox::wake`).
    Off,
}

impl WakeupTrigger {
    /// The name used on the command line: `idle`, `every-insert`, `off`.
    pub fn name(self) -> &'static str {
        match self {
            WakeupTrigger::Idle => "idle",
            WakeupTrigger::EveryInsert => "every-insert",
            WakeupTrigger::Off => "off",
        }
    }

    /// Parses [`WakeupTrigger::name`]; the error says which names exist.
    pub fn parse(s: &str) -> Result<Self> {
        use WakeupTrigger as W;
        [W::Idle, W::EveryInsert, W::Off]
            .into_iter()
            .find(|m| m.name() == s)
            .ok_or_else(|| {
                Error::invalid(
                    "wake-up trigger",
                    format!(
                        "{} is not a wake-up mode: use idle, every-insert or off",
                        crate::redact::quoted(s)
                    ),
                )
            })
    }
}

impl std::str::FromStr for WakeupTrigger {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        WakeupTrigger::parse(s)
    }
}

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
    let mut warnings = Vec::new();
    let slot = match options.mode {
        Some(DeliveryMode::Wal) => Some(prepare_wal(conn, schema, options, &mut warnings).await?),
        _ => None,
    };
    let installed = installed_delivery(conn, schema).await?;
    let leaving_wal = options.mode == Some(DeliveryMode::Table) && installed == DeliveryMode::Wal;
    // The slot that the switch back would read to its mark, when it can no
    // longer be read: the switch then ends at once.
    let gone = match leaving_wal {
        true => match wal::recorded_slot_if_any(conn, schema).await? {
            Some((slot, _)) => match switch_back::slot_health(conn, &slot).await? {
                SlotHealth::Readable => None,
                health => Some((slot, health)),
            },
            None => None,
        },
        false => None,
    };
    let mut tx = conn
        .begin()
        .await
        .map_err(Error::db("starting migration"))?;
    sqlx::query(q::MIGRATION_LOCK)
        .bind(schema.name())
        .execute(&mut *tx)
        .await
        .map_err(Error::db("locking for migration"))?;
    let setup = schema.render(q::MIGRATION_TABLE_CREATE);
    sqlx::raw_sql(&setup)
        .execute(&mut *tx)
        .await
        .map_err(Error::db("creating the migrations table"))?;
    let done: Vec<i32> = sqlx::query_scalar(&schema.render(q::MIGRATION_APPLIED))
        .fetch_all(&mut *tx)
        .await
        .map_err(Error::db("reading applied migrations"))?;

    if done.contains(&1) {
        let existing: i64 = sqlx::query_scalar(&schema.render(q::MIGRATION_PARTITION_COUNT))
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
            .replace("{partitions}", &partitions.to_string())
            .replace("{channel}", &schema.channel())
            .replace("{prefix}", &wal::message_prefix(schema));
        sqlx::raw_sql(&sql)
            .execute(&mut *tx)
            .await
            .map_err(Error::db("applying a migration"))?;
        sqlx::query(&schema.render(q::MIGRATION_RECORD))
            .bind(version)
            .bind(name)
            .execute(&mut *tx)
            .await
            .map_err(Error::db("recording a migration"))?;
        applied.push(format!("{version:04}_{name}"));
    }

    let wanted = options.wakeup.or(match options.notify_trigger {
        Some(true) => Some(WakeupTrigger::EveryInsert),
        Some(false) => Some(WakeupTrigger::Idle),
        None => None,
    });
    // Migrations 7 and 9 changed how the triggers test their conditions and
    // 16 the channel they notify: a schema that has just received one gets
    // its own mode's triggers again, in today's form.
    let wanted = match wanted {
        None if applied.iter().any(|m| {
            m.starts_with("0007_") || m.starts_with("0009_") || m.starts_with("0016_")
        }) =>
        {
            Some(installed_mode(&mut tx, schema).await?)
        }
        wanted => wanted,
    };
    if let Some(mode) = wanted {
        let (every_insert, idle) = match mode {
            WakeupTrigger::Idle => (TRIGGER_OFF, q::IDLE_TRIGGER_ON),
            WakeupTrigger::EveryInsert => (TRIGGER_ON, q::IDLE_TRIGGER_OFF),
            WakeupTrigger::Off => (TRIGGER_OFF, q::IDLE_TRIGGER_OFF),
        };
        for sql in [every_insert, idle] {
            let sql = schema.render(sql).replace("{channel}", &schema.channel());
            sqlx::raw_sql(&sql)
                .execute(&mut *tx)
                .await
                .map_err(Error::db("changing the wake-up trigger"))?;
        }
    }
    // A schema that has just received migration 13 gets the table mode's
    // `outbox_emit`; one switched back to the table gets it again. Rows
    // written from then on wait until the relay has read the slot to the
    // switch's mark (wal/switch_back.rs): none overtakes an event of its
    // aggregate still in the slot.
    if leaving_wal && gone.is_none() {
        switch_back::begin(&mut tx, schema).await?;
    }
    if options.mode == Some(DeliveryMode::Table) || applied.iter().any(|m| m.starts_with("0013_")) {
        sqlx::raw_sql(&schema.render(WAL_MODE_OFF))
            .execute(&mut *tx)
            .await
            .map_err(Error::db("installing the table delivery mode"))?;
    }
    let partitions: i64 = sqlx::query_scalar(&schema.render(q::MIGRATION_PARTITION_COUNT))
        .fetch_one(&mut *tx)
        .await
        .map_err(Error::db("reading the partition count"))?;
    let wakeup = installed_mode(&mut tx, schema).await?;
    let notify_trigger = wakeup == WakeupTrigger::EveryInsert;
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
    if let Some((slot, health)) = &gone {
        switch_back::end(conn, schema, slot).await?;
        warnings.push(format!(
            "{}: the switch to the table mode ended at once, without reading it; events emitted into it after its last confirmed position could not be delivered (SELECT confirmed_lsn FROM {}.outbox_wal was its last saved position)",
            health.describe(slot),
            schema.name()
        ));
    } else if options.mode == Some(DeliveryMode::Table)
        && switch_back::state(conn, schema).await? == Some(None)
    {
        // Just begun, or begun by a call that stopped before its mark.
        switch_back::wait_for_older(
            conn,
            options
                .switch_timeout
                .unwrap_or(switch_back::DEFAULT_SWITCH_TIMEOUT),
        )
        .await?;
        switch_back::mark(conn, schema).await?;
    }
    let slot_created = match &slot {
        Some(slot) => switch_to_wal(conn, schema, slot).await?,
        None => false,
    };
    let mode = installed_delivery(conn, schema).await?;
    let slot = wal::recorded_slot(&mut *conn, schema)
        .await?
        .map(|(slot, _)| slot);
    Ok(MigrationReport {
        applied,
        partitions: partitions as u32,
        notify_trigger,
        wakeup,
        mode,
        slot,
        slot_created,
        warnings,
    })
}

/// Creates the publication and slot (each committing on its own, before
/// any producer emits), then records the slot and installs the WAL mode's
/// `outbox_emit` and capture trigger in one transaction. Returns whether
/// the slot was created now.
async fn switch_to_wal(conn: &mut PgConnection, schema: &Schema, slot: &str) -> Result<bool> {
    let created = wal::setup::create_slot(conn, schema, slot).await?;
    let mut tx = conn
        .begin()
        .await
        .map_err(Error::db("starting the switch to the WAL mode"))?;
    sqlx::query(q::MIGRATION_LOCK)
        .bind(schema.name())
        .execute(&mut *tx)
        .await
        .map_err(Error::db("locking for migration"))?;
    sqlx::query(&schema.render(q::WAL_SLOT_RECORD))
        .bind(slot)
        .bind(slot)
        .execute(&mut *tx)
        .await
        .map_err(Error::db("recording the slot"))?;
    let sql = schema
        .render(WAL_MODE_ON)
        .replace("{prefix}", &wal::message_prefix(schema));
    sqlx::raw_sql(&sql)
        .execute(&mut *tx)
        .await
        .map_err(Error::db("installing the WAL delivery mode"))?;
    tx.commit()
        .await
        .map_err(Error::db("committing the switch to the WAL mode"))?;
    Ok(created)
}

/// Checks the server and the slot before switching to the WAL mode, and
/// returns the slot to use. A switch back to the table mode that the relay
/// has not finished is waited for (refused), unless its slot can no longer
/// be read: it is ended then, with a warning. A schema already in the WAL
/// mode keeps its slot: moving to another would strand what waits in it.
async fn prepare_wal(
    conn: &mut PgConnection,
    schema: &Schema,
    options: &MigrateOptions,
    warnings: &mut Vec<String>,
) -> Result<String> {
    let recorded = wal::recorded_slot_if_any(conn, schema)
        .await?
        .map(|(slot, _)| slot);
    let slot = match (&options.slot, &recorded) {
        (Some(name), _) => {
            wal::validate_slot_name(name)?;
            name.clone()
        }
        (None, Some(recorded)) => recorded.clone(),
        (None, None) => wal::setup::default_slot(conn, schema).await?,
    };
    let switch = match &recorded {
        Some(_) => switch_back::state(conn, schema).await?,
        None => None,
    };
    if let (Some(recorded), Some(switch)) = (&recorded, switch) {
        match switch_back::slot_health(conn, recorded).await? {
            SlotHealth::Readable => {
                return Err(Error::invalid(
                    "mode",
                    match switch {
                        Some(_) => "the last switch back to the table mode is not finished: the relay has not yet read the replication slot to it. Run the relay until it logs 'switched to the table mode', then switch again".to_owned(),
                        None => "the last switch back to the table mode is still waiting for transactions older than it: run outbox migrate --mode table to finish it (it waits for them), run the relay until it logs 'switched to the table mode', then switch again".to_owned(),
                    },
                ));
            }
            health => {
                switch_back::end(conn, schema, recorded).await?;
                warnings.push(format!(
                    "{}: the unfinished switch back to the table mode was ended without reading it; events emitted into it after its last confirmed position could not be delivered",
                    health.describe(recorded)
                ));
            }
        }
    } else if let Some(recorded) = &recorded {
        let in_wal = installed_delivery(conn, schema).await? == DeliveryMode::Wal;
        if *recorded == slot && in_wal {
            let health = switch_back::slot_health(conn, recorded).await?;
            if health != SlotHealth::Readable {
                switch_back::drop_slot(conn, recorded).await?;
                warnings.push(format!(
                    "{}: it is created again, and read from now on; events emitted into it after its last confirmed position could not be delivered",
                    health.describe(recorded)
                ));
            }
        }
        if *recorded != slot && in_wal {
            return Err(Error::invalid(
                "slot",
                format!(
                    "schema {} is read through replication slot {recorded}, which may still hold events: to move it to {slot}, run outbox migrate --mode table, run the relay until it logs 'switched to the table mode' (the old slot is then read to the end and dropped), then outbox migrate --mode wal --slot {slot}",
                    schema.name()
                ),
            ));
        }
    }
    wal::setup::preflight(conn, &slot).await?;
    wal::setup::refuse_foreign_slot(conn, schema, &slot, recorded.as_deref(), options.adopt_slot)
        .await?;
    Ok(slot)
}

/// The delivery mode `schema` is in: the WAL mode's capture trigger tells.
pub(crate) async fn installed_delivery(
    conn: &mut PgConnection,
    schema: &Schema,
) -> Result<DeliveryMode> {
    let wal: bool = sqlx::query_scalar(q::WAL_MODE_INSTALLED)
        .bind(schema.name())
        .fetch_one(&mut *conn)
        .await
        .map_err(Error::db("reading the delivery mode"))?;
    Ok(if wal {
        DeliveryMode::Wal
    } else {
        DeliveryMode::Table
    })
}

/// The wake-up mode `schema`'s triggers implement.
async fn installed_mode(conn: &mut PgConnection, schema: &Schema) -> Result<WakeupTrigger> {
    let triggers: Vec<String> = sqlx::query_scalar(q::WAKEUP_TRIGGERS_INSTALLED)
        .bind(schema.name())
        .fetch_all(&mut *conn)
        .await
        .map_err(Error::db("reading the wake-up triggers"))?;
    Ok(if triggers.iter().any(|t| t == "outbox_insert_notify") {
        WakeupTrigger::EveryInsert
    } else if triggers.iter().any(|t| t == "outbox_wake_idle_relay") {
        WakeupTrigger::Idle
    } else {
        WakeupTrigger::Off
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wakeup_trigger_parses_from_its_name_and_nothing_else() {
        for w in [
            WakeupTrigger::Idle,
            WakeupTrigger::EveryInsert,
            WakeupTrigger::Off,
        ] {
            assert_eq!(w.name().parse::<WakeupTrigger>().unwrap(), w);
        }
        for bad in ["", "Idle", "every_insert", "sometimes"] {
            let e = WakeupTrigger::parse(bad).unwrap_err().to_string();
            assert!(e.contains("use idle, every-insert or off"), "{bad}: {e}");
        }
    }
}
