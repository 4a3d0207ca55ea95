//! The delivery mode's part of a migration: the switch to the WAL mode
//! (checks, slot, `outbox_emit`) and the switch back to the table mode.

use sqlx::{Connection, PgConnection};

use super::MigrateOptions;
use crate::error::{Error, Result};
use crate::queries as q;
use crate::schema::Schema;
use crate::wal::switch_back::{self, SlotHealth};
use crate::wal::{self, DeliveryMode};

const WAL_MODE_ON: &str = include_str!("../../migrations/wal_mode_on.sql");
const WAL_MODE_OFF: &str = include_str!("../../migrations/wal_mode_off.sql");

/// Creates the publication and slot (each committing on its own, before
/// any producer emits), then records the slot and installs the WAL mode's
/// `outbox_emit` and capture trigger in one transaction. Returns whether
/// the slot was created now.
pub(super) async fn switch_to_wal(
    conn: &mut PgConnection,
    schema: &Schema,
    slot: &str,
) -> Result<bool> {
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
pub(super) async fn prepare_wal(
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

/// A switch back to the table mode asked of a schema in the WAL mode.
pub(super) struct Leaving {
    /// The schema is in the WAL mode and the table mode is asked for.
    asked: bool,
    /// The slot the switch back would read to its mark, when it can no
    /// longer be read (with why): the switch then ends at once.
    gone: Option<(String, SlotHealth)>,
}

/// Whether `options` switch `schema` back to the table mode, and whether
/// its slot can still be read to the switch.
pub(super) async fn leaving_wal(
    conn: &mut PgConnection,
    schema: &Schema,
    options: &MigrateOptions,
) -> Result<Leaving> {
    let asked = options.mode == Some(DeliveryMode::Table)
        && installed_delivery(conn, schema).await? == DeliveryMode::Wal;
    let mut gone = None;
    if asked {
        if let Some((slot, _)) = wal::recorded_slot_if_any(conn, schema).await? {
            match switch_back::slot_health(conn, &slot).await? {
                SlotHealth::Readable => {}
                health => gone = Some((slot, health)),
            }
        }
    }
    Ok(Leaving { asked, gone })
}

/// The delivery mode's part of the migration's transaction. A switch back
/// pauses the table's rows (wal/switch_back.rs): none overtakes an event
/// of its aggregate still in the slot. The table mode's `outbox_emit` is
/// installed when the table mode is asked for, and on a schema that has
/// just received migration 13 (which brings `outbox_emit`).
pub(super) async fn in_transaction(
    conn: &mut PgConnection,
    schema: &Schema,
    options: &MigrateOptions,
    leaving: &Leaving,
    applied: &[String],
) -> Result<()> {
    if leaving.asked && leaving.gone.is_none() {
        switch_back::begin(conn, schema).await?;
    }
    if options.mode == Some(DeliveryMode::Table) || applied.iter().any(|m| m.starts_with("0013_")) {
        sqlx::raw_sql(&schema.render(WAL_MODE_OFF))
            .execute(&mut *conn)
            .await
            .map_err(Error::db("installing the table delivery mode"))?;
    }
    Ok(())
}

/// After the commit: a switch back whose slot is gone ends at once, with a
/// warning; one just begun (or begun by a call that stopped before its
/// mark) waits for the transactions older than it, then writes its mark.
pub(super) async fn after_commit(
    conn: &mut PgConnection,
    schema: &Schema,
    options: &MigrateOptions,
    leaving: &Leaving,
    warnings: &mut Vec<String>,
) -> Result<()> {
    if let Some((slot, health)) = &leaving.gone {
        switch_back::end(conn, schema, slot).await?;
        warnings.push(format!(
            "{}: the switch to the table mode ended at once, without reading it; events emitted into it after its last confirmed position could not be delivered (SELECT confirmed_lsn FROM {}.outbox_wal was its last saved position)",
            health.describe(slot),
            schema.name()
        ));
    } else if options.mode == Some(DeliveryMode::Table)
        && switch_back::state(conn, schema).await? == Some(None)
    {
        switch_back::wait_for_older(
            conn,
            options
                .switch_timeout
                .unwrap_or(switch_back::DEFAULT_SWITCH_TIMEOUT),
        )
        .await?;
        switch_back::mark(conn, schema).await?;
    }
    Ok(())
}
