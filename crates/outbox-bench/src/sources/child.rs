//! `outbox relay` of many sources as a child process of the bench: its
//! config file (`[[source]]` entries, `[sources]` settings), the process
//! (started as [`ChildRelay`] starts every bench relay, so it dies with the
//! bench and names its sessions), and what the bench reads of it in the
//! database: its sessions, and whether its schemas are dormant.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use sqlx::PgPool;
use toml::{Table, Value};

use super::super::child_relay::{child_command, ChildRelay, Output, RELAY_APPLICATION_NAME};

/// How often the bench looks at the database while waiting.
const LOOK_EVERY: Duration = Duration::from_millis(20);

/// One `[[source]]` entry.
pub struct Entry {
    pub name: &'static str,
    /// `schema = NAME` (`pattern` false) or `schemas = PATTERN`.
    pub schemas: String,
    pub pattern: bool,
}

impl Entry {
    pub fn schema(name: &'static str, schema: &str) -> Entry {
        Entry {
            name,
            schemas: schema.to_owned(),
            pattern: false,
        }
    }

    pub fn pattern(name: &'static str, pattern: &str) -> Entry {
        Entry {
            name,
            schemas: pattern.to_owned(),
            pattern: true,
        }
    }
}

/// The config file of a relay of `entries` on `url`, every source
/// publishing to stdout, with `[sources] pool_size = pool_size`.
pub fn config_text(url: &str, pool_size: u32, entries: &[Entry]) -> Result<String> {
    let mut top = Table::new();
    top.insert("database_url".into(), Value::String(url.to_owned()));
    top.insert("publisher".into(), Value::String("stdout".into()));
    let mut sources = Table::new();
    sources.insert("pool_size".into(), Value::Integer(i64::from(pool_size)));
    top.insert("sources".into(), Value::Table(sources));
    let list = entries
        .iter()
        .map(|e| {
            let mut t = Table::new();
            t.insert("name".into(), Value::String(e.name.into()));
            t.insert("database_url".into(), Value::String(url.to_owned()));
            let key = if e.pattern { "schemas" } else { "schema" };
            t.insert(key.into(), Value::String(e.schemas.clone()));
            Value::Table(t)
        })
        .collect();
    top.insert("source".into(), Value::Array(list));
    Ok(toml::to_string(&top)?)
}

/// Where the bench keeps its relays' config files: a directory only this
/// user can read (they may hold the database's password), removed when
/// dropped.
pub struct Configs {
    dir: PathBuf,
}

impl Configs {
    pub fn new() -> Result<Configs> {
        use std::os::unix::fs::DirBuilderExt;
        let dir = std::env::temp_dir().join(format!(
            "outbox-bench-sources-{}-{:08x}",
            std::process::id(),
            rand::random::<u32>()
        ));
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&dir)
            .with_context(|| format!("cannot create {}", dir.display()))?;
        Ok(Configs { dir })
    }

    /// Writes `text` as `NAME.toml`.
    fn write(&self, name: &str, text: &str) -> Result<PathBuf> {
        let path = self.dir.join(format!("{name}.toml"));
        std::fs::write(&path, text).with_context(|| format!("cannot write {}", path.display()))?;
        Ok(path)
    }

    /// Starts `outbox relay` on the config `text` as instance `instance`,
    /// its standard output timed line by line.
    pub fn spawn(&self, instance: &str, text: &str) -> Result<ChildRelay> {
        let path = self.write(instance, text)?;
        ChildRelay::spawn_command(command(&path, instance)?, instance, Output::Timed)
    }
}

impl Drop for Configs {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// `outbox --config PATH relay`, as every bench runs its relays
/// ([`child_command`]): the config file says everything.
fn command(config: &Path, instance: &str) -> Result<Command> {
    child_command(Some(config), &[], instance)
}

/// The relay's database sessions now (by their `application_name`).
pub async fn relay_sessions(pool: &PgPool) -> Result<i64> {
    Ok(
        sqlx::query_scalar("SELECT count(*) FROM pg_stat_activity WHERE application_name = $1")
            .bind(RELAY_APPLICATION_NAME)
            .fetch_one(pool)
            .await?,
    )
}

/// The statement counting which of `schemas` are dormant: the relay's
/// idle announcement stands (producers' trigger will wake it) and no
/// instance holds a lease on any of its partitions.
fn dormant_sql(schemas: &[String]) -> String {
    let one = |s: &String| {
        format!(
            "SELECT coalesce(pg_sequence_last_value('{s}.outbox_relay_idle_until'), 0)
                      > date_part('epoch', now()) * 1000
                    AND NOT EXISTS (SELECT 1 FROM {s}.outbox_partitions
                                    WHERE owner IS NOT NULL AND lease_until > now()) AS dormant"
        )
    };
    let all: Vec<String> = schemas.iter().map(one).collect();
    format!(
        "SELECT count(*) FILTER (WHERE dormant) FROM ({}) AS s",
        all.join("\nUNION ALL\n")
    )
}

/// How many of `schemas` are dormant now.
pub async fn dormant(pool: &PgPool, schemas: &[String]) -> Result<usize> {
    let n: i64 = sqlx::query_scalar(&dormant_sql(schemas))
        .fetch_one(pool)
        .await?;
    Ok(n as usize)
}

/// Waits until every one of `schemas` is dormant (the relay still
/// running).
pub async fn wait_dormant(
    relay: &mut ChildRelay,
    pool: &PgPool,
    schemas: &[String],
    within: Duration,
) -> Result<()> {
    let deadline = Instant::now() + within;
    loop {
        relay.check_running()?;
        let n = dormant(pool, schemas).await?;
        if n == schemas.len() {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!(
                "only {n} of {} schemas became dormant (idle announcement standing, no lease held) within {} s",
                schemas.len(),
                within.as_secs()
            );
        }
        tokio::time::sleep(LOOK_EVERY).await;
    }
}

/// Events not yet delivered (nor dead) in `schemas`.
pub async fn pending(pool: &PgPool, schemas: &[String]) -> Result<i64> {
    let all: Vec<String> = schemas
        .iter()
        .map(|s| {
            format!(
                "SELECT count(*) AS n FROM {s}.outbox_events
                 WHERE processed_at IS NULL AND dead_lettered_at IS NULL"
            )
        })
        .collect();
    let sql = format!(
        "SELECT coalesce(sum(n), 0)::bigint FROM ({}) AS s",
        all.join("\nUNION ALL\n")
    );
    Ok(sqlx::query_scalar(&sql).fetch_one(pool).await?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_config_file_lists_each_source_with_its_schema_or_pattern() {
        let text = config_text(
            "postgres://u:p\"q@h/db",
            7,
            &[
                Entry::pattern("tenants", "bench_tenant_*"),
                Entry::schema("one", "bench_one"),
            ],
        )
        .unwrap();
        let parsed: Table = text.parse().unwrap();
        assert_eq!(parsed["sources"]["pool_size"].as_integer(), Some(7));
        assert_eq!(parsed["publisher"].as_str(), Some("stdout"));
        let list = parsed["source"].as_array().unwrap();
        assert_eq!(list[0]["schemas"].as_str(), Some("bench_tenant_*"));
        assert_eq!(list[1]["schema"].as_str(), Some("bench_one"));
        assert_eq!(
            list[1]["database_url"].as_str(),
            Some("postgres://u:p\"q@h/db")
        );
        assert!(text.contains("[[source]]"), "{text}");
    }

    #[test]
    fn dormancy_is_read_for_every_schema_in_one_statement() {
        let sql = dormant_sql(&["a1".into(), "a2".into()]);
        assert_eq!(sql.matches("UNION ALL").count(), 1);
        assert!(
            sql.contains("a2.outbox_partitions") && sql.contains("'a1.outbox_relay_idle_until'")
        );
    }
}
