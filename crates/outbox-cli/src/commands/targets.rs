//! `--source NAME`: which database and schema `outbox status` and the
//! dead-letter commands work on. Without `[[source]]` entries: the
//! configured `database_url` and `schema`, as always. With entries: the
//! source named (an entry, or `NAME/SCHEMA` for a schema an entry's
//! pattern found), or every source when none is named. Commands that change
//! rows take one source only ([`Ctx::target_to_change`]).

use std::collections::HashMap;

use anyhow::{anyhow, bail, Result};
use outbox::Schema;
use sqlx::PgPool;

use crate::config::{SchemaSelector, SourceEntry};
use crate::ctx::Ctx;
use crate::db;
use crate::text::{cut, error_chain};

/// One database and schema a command works on.
#[derive(Debug, Clone)]
pub struct Target {
    /// The source's name; `None` without `[[source]]` entries.
    pub source: Option<String>,
    /// Its database URL.
    pub url: String,
    /// Its schema.
    pub schema: Schema,
}

/// A source whose schemas could not be listed (its database is down): it
/// is reported, and the other sources are still served.
#[derive(Debug)]
pub struct Unreachable {
    /// The `[[source]]` entry's name.
    pub source: String,
    /// Why, one line, passwords hidden.
    pub error: String,
}

/// The pools of the databases a command has opened, one per URL (several
/// sources may share a database); a database that could not be reached
/// is not tried again by the same command.
#[derive(Default)]
pub struct Pools(HashMap<String, Result<PgPool, String>>);

impl Pools {
    /// The pool of `url`, opened on first use.
    pub async fn get(&mut self, url: &str) -> Result<PgPool> {
        if !self.0.contains_key(url) {
            let opened = db::connect(url, 1).await.map_err(|e| one_line(&e));
            self.0.insert(url.to_owned(), opened);
        }
        match &self.0[url] {
            Ok(pool) => Ok(pool.clone()),
            Err(e) => Err(anyhow!(e.clone())),
        }
    }
}

/// An error on one line, passwords hidden.
pub fn one_line(e: &anyhow::Error) -> String {
    db::redact_text(&error_chain(e))
}

impl Ctx {
    /// Whether the configuration has `[[source]]` entries.
    pub fn has_sources(&self) -> bool {
        !self.loaded.config.source.is_empty()
    }

    /// Refuses `--source` (`source`) when there are no `[[source]]`
    /// entries to pick from.
    pub fn refuse_source_without_sources(&self, source: Option<&str>) -> Result<()> {
        match source {
            Some(name) if !self.has_sources() => bail!(
                "--source {} needs [[source]] entries in the config file, and it has none: leave --source out to use --database-url and --schema",
                cut(name)
            ),
            _ => Ok(()),
        }
    }

    /// The resolved `[[source]]` entries.
    fn source_entries(&self) -> Result<Vec<SourceEntry>> {
        self.loaded.config.sources().map_err(|r| anyhow!(r))
    }

    /// What `--source` (`source`) selects, in configuration order (a
    /// pattern's schemas sorted by name): that source, or every source
    /// when `None`. An entry whose pattern cannot be matched (its database
    /// is down) comes back as [`Unreachable`] in its place. Without
    /// `[[source]]` entries: the configured database and schema.
    pub async fn targets(
        &self,
        source: Option<&str>,
        pools: &mut Pools,
    ) -> Result<Vec<Result<Target, Unreachable>>> {
        if !self.has_sources() {
            self.refuse_source_without_sources(source)?;
            return Ok(vec![Ok(Target {
                source: None,
                url: db::require_url(self.database_url())?,
                schema: self.schema.clone(),
            })]);
        }
        let entries = self.source_entries()?;
        if let crate::config::Origin::Flag(flag) = self.loaded.origin("schema") {
            bail!(
                "{flag} is not used with [[source]] entries: pick a source with --source NAME ({})",
                names(&entries)
            );
        }
        let Some(name) = source else {
            let mut out = Vec::new();
            for entry in &entries {
                out.extend(expand(entry, pools).await);
            }
            return Ok(out);
        };
        let (entry_name, schema) = match name.split_once('/') {
            Some((entry, schema)) => (entry, Some(schema)),
            None => (name, None),
        };
        let Some(entry) = entries.iter().find(|e| e.name == entry_name) else {
            bail!(
                "unknown source {}: the sources are {}",
                cut(name),
                names(&entries)
            );
        };
        match (schema, &entry.schemas) {
            (None, _) => Ok(expand(entry, pools).await),
            (Some(_), SchemaSelector::One(_)) => bail!(
                "source {} serves one schema: use --source {}",
                cut(name),
                entry.name
            ),
            (Some(schema), SchemaSelector::Pattern(pattern)) => {
                let found = matching(entry, pattern, pools)
                    .await
                    .map_err(|e| anyhow!("source {}: {e}", entry.name))?;
                match found.into_iter().find(|s| s.name() == schema) {
                    Some(schema) => Ok(vec![Ok(target(entry, schema))]),
                    None => bail!(
                        "unknown source {}: no schema {} matching {} holds the outbox tables in source {}'s database (run `outbox migrate --schema {}` first?)",
                        cut(name),
                        cut(schema),
                        cut(pattern),
                        entry.name,
                        cut(schema)
                    ),
                }
            }
        }
    }

    /// The one source a command that changes rows (`verb`) works on:
    /// `--source` must name one when there is more than one.
    pub async fn target_to_change(
        &self,
        source: Option<&str>,
        verb: &str,
        pools: &mut Pools,
    ) -> Result<Target> {
        let mut all = self.targets(source, pools).await?;
        if all.len() == 1 {
            return all
                .pop()
                .expect("one")
                .map_err(|u| anyhow!("source {}: {}", u.source, u.error));
        }
        let listed: Vec<String> = all
            .iter()
            .map(|t| match t {
                Ok(t) => t.source.clone().unwrap_or_default(),
                Err(u) => format!("{}/… (cannot list: {})", u.source, u.error),
            })
            .collect();
        if listed.is_empty() {
            bail!(
                "there is no source to {verb}: no schema matches {} yet",
                source.map_or_else(|| "the [[source]] patterns".to_owned(), cut)
            );
        }
        bail!(
            "{verb} changes one source at a time: pass --source NAME, one of {}",
            listed.join(", ")
        )
    }
}

/// The names `--source` takes, for messages: `orders, tenants/SCHEMA`.
pub fn names(entries: &[SourceEntry]) -> String {
    entries
        .iter()
        .map(|e| match e.schemas {
            SchemaSelector::One(_) => e.name.clone(),
            SchemaSelector::Pattern(_) => format!("{0} or {0}/SCHEMA", e.name),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

fn target(entry: &SourceEntry, schema: Schema) -> Target {
    Target {
        source: Some(entry.source_name(&schema)),
        url: entry.database_url.clone(),
        schema,
    }
}

/// The sources of `entry`: its schema, or each schema its pattern matches.
async fn expand(entry: &SourceEntry, pools: &mut Pools) -> Vec<Result<Target, Unreachable>> {
    match &entry.schemas {
        SchemaSelector::One(schema) => vec![Ok(target(entry, schema.clone()))],
        SchemaSelector::Pattern(pattern) => match matching(entry, pattern, pools).await {
            Ok(found) => found.into_iter().map(|s| Ok(target(entry, s))).collect(),
            Err(error) => vec![Err(Unreachable {
                source: entry.name.clone(),
                error,
            })],
        },
    }
}

/// The schemas of `entry`'s database that `pattern` matches.
async fn matching(
    entry: &SourceEntry,
    pattern: &str,
    pools: &mut Pools,
) -> Result<Vec<Schema>, String> {
    let pool = pools
        .get(&entry.database_url)
        .await
        .map_err(|e| one_line(&e))?;
    let mut conn = pool.acquire().await.map_err(|e| one_line(&e.into()))?;
    outbox::discover::schemas_matching(&mut conn, pattern)
        .await
        .map_err(|e| one_line(&e.into()))
}
