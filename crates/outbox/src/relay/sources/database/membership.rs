//! Pattern membership: the `schemas` patterns matched again, new schemas
//! served, schemas no longer matched let go.

use std::sync::Arc;

use crate::relay::sources::shared::SourceShared;
use crate::relay::sources::SchemaSelector;
use crate::schema::Schema;

use super::State;

impl State {
    /// Matches every pattern again; starts serving the new schemas and
    /// returns them. Schemas no longer matched are let go by
    /// [`State::let_go_unmatched`].
    pub(super) async fn rescan(&mut self) -> Vec<Arc<SourceShared>> {
        let mut added = Vec::new();
        let mut seen: Vec<(usize, Vec<Schema>)> = Vec::new();
        for (i, def) in self.db.defs.iter().enumerate() {
            let SchemaSelector::Pattern(pattern) = &def.selector else {
                continue;
            };
            let found = async {
                let mut conn = self
                    .pool
                    .acquire()
                    .await
                    .map_err(crate::Error::db("connecting"))?;
                crate::discover::schemas_matching(&mut conn, pattern).await
            }
            .await;
            match found {
                Ok(schemas) => seen.push((i, schemas)),
                Err(e) => {
                    tracing::warn!(source = %def.name, pattern = %pattern, error = %e.with_causes(), "could not match the schemas; serving the ones found before");
                }
            }
        }
        for (i, schemas) in &seen {
            for schema in schemas {
                let name = format!("{}/{}", self.db.defs[*i].name, schema.name());
                if !self.served.contains_key(schema.name()) {
                    if let Some(shared) = self.add(*i, schema.clone(), name) {
                        added.push(shared);
                    }
                }
            }
        }
        self.matched = seen;
        let patterns = self
            .db
            .defs
            .iter()
            .filter(|d| matches!(d.selector, SchemaSelector::Pattern(_)));
        if !self.found && self.matched.len() == patterns.count() {
            self.found = true;
            self.db.registry.found_database();
        }
        added
    }

    /// Lets go of the schemas a pattern no longer matches (dropped, or
    /// renamed): their workers stop, the observer forgets them. Returns
    /// whether any went.
    pub(super) fn let_go_unmatched(&mut self) -> bool {
        let gone: Vec<String> = self
            .served
            .iter()
            .filter(|(schema, served)| {
                self.matched.iter().any(|(def, schemas)| {
                    *def == served.def && !schemas.iter().any(|s| s.name() == schema.as_str())
                })
            })
            .map(|(schema, _)| schema.clone())
            .collect();
        for schema in &gone {
            let Some(served) = self.served.remove(schema) else {
                continue;
            };
            let name = served.shared.name.clone();
            tracing::info!(source = %name, schema = %schema, "letting the source go: its schema is gone or no longer matches");
            let _ = served.stop.send(true);
            let registry = self.db.registry.clone();
            let observer = self.db.observer.clone();
            tokio::spawn(async move {
                let _ = served.task.await;
                registry.remove(&name);
                if let Some(o) = observer {
                    o.source_removed(&name);
                }
            });
        }
        !gone.is_empty()
    }
}
