//! The wake-up triggers: how rows inserted by plain SQL wake a relay in
//! another process, installed as the schema's mode asks.

use sqlx::PgConnection;

use crate::error::{Error, Result};
use crate::queries as q;
use crate::schema::Schema;

const TRIGGER_ON: &str = include_str!("../../migrations/notify_trigger_on.sql");
const TRIGGER_OFF: &str = include_str!("../../migrations/notify_trigger_off.sql");

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

/// The migrations that change the triggers' bodies: how they test their
/// conditions (7, 9) and the channel they notify (16). A schema that has
/// just received one gets its mode's triggers again, in their current form.
const REWRITE_TRIGGERS: [&str; 3] = ["0007_", "0009_", "0016_"];

/// Installs the wake-up mode asked for (`wakeup`, else `notify_trigger`),
/// or the schema's own again after a migration in [`REWRITE_TRIGGERS`].
pub(super) async fn reconcile(
    conn: &mut PgConnection,
    schema: &Schema,
    wakeup: Option<WakeupTrigger>,
    notify_trigger: Option<bool>,
    applied: &[String],
) -> Result<()> {
    let wanted = wakeup.or(match notify_trigger {
        Some(true) => Some(WakeupTrigger::EveryInsert),
        Some(false) => Some(WakeupTrigger::Idle),
        None => None,
    });
    let rewritten = applied
        .iter()
        .any(|m| REWRITE_TRIGGERS.iter().any(|v| m.starts_with(v)));
    let wanted = match wanted {
        None if rewritten => installed_mode(conn, schema).await?,
        None => return Ok(()),
        Some(mode) => mode,
    };
    let (every_insert, idle) = match wanted {
        WakeupTrigger::Idle => (TRIGGER_OFF, q::IDLE_TRIGGER_ON),
        WakeupTrigger::EveryInsert => (TRIGGER_ON, q::IDLE_TRIGGER_OFF),
        WakeupTrigger::Off => (TRIGGER_OFF, q::IDLE_TRIGGER_OFF),
    };
    for sql in [every_insert, idle] {
        let sql = schema.render(sql).replace("{channel}", &schema.channel());
        sqlx::raw_sql(&sql)
            .execute(&mut *conn)
            .await
            .map_err(Error::db("changing the wake-up trigger"))?;
    }
    Ok(())
}

/// The wake-up mode `schema`'s triggers implement.
pub(super) async fn installed_mode(
    conn: &mut PgConnection,
    schema: &Schema,
) -> Result<WakeupTrigger> {
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
