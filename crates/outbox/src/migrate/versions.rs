//! The numbered migrations: each applied once, in order, and recorded.

use sqlx::PgConnection;

use crate::error::{Error, Result};
use crate::queries as q;
use crate::schema::Schema;
use crate::wal;

/// The migrations, in order. Each is applied once and recorded in
/// `{schema}.outbox_schema_migrations`; each is also written to be
/// harmless if applied again.
const MIGRATIONS: &[(i32, &str, &str)] = &[
    (
        1,
        "outbox",
        include_str!("../../migrations/0001_outbox.sql"),
    ),
    (
        2,
        "finite_timestamps",
        include_str!("../../migrations/0002_finite_timestamps.sql"),
    ),
    (
        3,
        "idle_wakeup",
        include_str!("../../migrations/0003_idle_wakeup.sql"),
    ),
    (
        4,
        "xid_first",
        include_str!("../../migrations/0004_xid_first.sql"),
    ),
    (
        5,
        "retry_index",
        include_str!("../../migrations/0005_retry_index.sql"),
    ),
    (
        6,
        "one_wakeup_trigger",
        include_str!("../../migrations/0006_one_wakeup_trigger.sql"),
    ),
    (
        7,
        "idle_flag_in_a_sequence",
        include_str!("../../migrations/0007_idle_flag_in_a_sequence.sql"),
    ),
    (
        8,
        "seq_always_positive",
        include_str!("../../migrations/0008_seq_always_positive.sql"),
    ),
    (
        9,
        "cheaper_inserts",
        include_str!("../../migrations/0009_cheaper_inserts.sql"),
    ),
    (10, "pause", include_str!("../../migrations/0010_pause.sql")),
    (
        11,
        "partition_function_and_row_checks",
        include_str!("../../migrations/0011_partition_function_and_row_checks.sql"),
    ),
    (
        12,
        "dead_letter_index",
        include_str!("../../migrations/0012_dead_letter_index.sql"),
    ),
    (13, "emit", include_str!("../../migrations/0013_emit.sql")),
    (
        14,
        "wal_switch_mark",
        include_str!("../../migrations/0014_wal_switch_mark.sql"),
    ),
    (
        15,
        "pauses_notify",
        include_str!("../../migrations/0015_pauses_notify.sql"),
    ),
    (
        16,
        "channel_names_fit",
        include_str!("../../migrations/0016_channel_names_fit.sql"),
    ),
    (
        17,
        "pauses_in_the_stream",
        include_str!("../../migrations/0017_pauses_in_the_stream.sql"),
    ),
];

/// Checks that `wanted` partitions agree with a schema that already has
/// its tables (the count is fixed once created).
pub(super) async fn check_partitions(
    conn: &mut PgConnection,
    schema: &Schema,
    done: &[i32],
    wanted: Option<u32>,
) -> Result<()> {
    let (true, Some(wanted)) = (done.contains(&1), wanted) else {
        return Ok(());
    };
    let existing = partition_count(conn, schema).await?;
    if i64::from(wanted) != existing {
        return Err(Error::invalid(
            "partitions",
            format!(
                "schema {} already has {existing} partitions, not {wanted}; the count is fixed once created (use a new schema to change it)",
                schema.name()
            ),
        ));
    }
    Ok(())
}

/// The versions already applied to `schema` (its migrations table created
/// if missing).
pub(super) async fn applied(conn: &mut PgConnection, schema: &Schema) -> Result<Vec<i32>> {
    sqlx::raw_sql(&schema.render(q::MIGRATION_TABLE_CREATE))
        .execute(&mut *conn)
        .await
        .map_err(Error::db("creating the migrations table"))?;
    sqlx::query_scalar(&schema.render(q::MIGRATION_APPLIED))
        .fetch_all(&mut *conn)
        .await
        .map_err(Error::db("reading applied migrations"))
}

/// Applies, in order, the migrations not in `done`; returns their names.
pub(super) async fn apply(
    conn: &mut PgConnection,
    schema: &Schema,
    done: &[i32],
    partitions: u32,
) -> Result<Vec<String>> {
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
            .execute(&mut *conn)
            .await
            .map_err(Error::db("applying a migration"))?;
        sqlx::query(&schema.render(q::MIGRATION_RECORD))
            .bind(version)
            .bind(name)
            .execute(&mut *conn)
            .await
            .map_err(Error::db("recording a migration"))?;
        applied.push(format!("{version:04}_{name}"));
    }
    Ok(applied)
}

/// The schema's partition count.
pub(super) async fn partition_count(conn: &mut PgConnection, schema: &Schema) -> Result<i64> {
    sqlx::query_scalar(&schema.render(q::MIGRATION_PARTITION_COUNT))
        .fetch_one(&mut *conn)
        .await
        .map_err(Error::db("reading the partition count"))
}
