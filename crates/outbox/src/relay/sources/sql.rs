//! The dormant check and the announcements as one statement per database:
//! the per-schema templates of `queries/sources.rs` joined over the schemas.
//! The text changes with the set of schemas, so these are sent unprepared.

use crate::queries as q;
use crate::schema::Schema;

/// The dormant check over `schemas`: returns the indexes of those with
/// claimable work.
pub(super) fn work_found(schemas: &[&Schema]) -> String {
    join(q::SOURCE_WORK_FOUND, schemas)
}

/// Renews the standing announcements of `schemas` (`$1`: the time to live
/// in ms).
pub(super) fn announcement_renew(schemas: &[&Schema]) -> String {
    join(q::SOURCE_ANNOUNCEMENT_RENEW, schemas)
}

/// Announces `schemas` as idle whatever stands (`$1`: the time to live in
/// ms).
pub(super) fn announcement_new(schemas: &[&Schema]) -> String {
    join(q::SOURCE_ANNOUNCEMENT_NEW, schemas)
}

fn join(template: &str, schemas: &[&Schema]) -> String {
    schemas
        .iter()
        .enumerate()
        .map(|(i, s)| s.render(template).replace("{i}", &i.to_string()))
        .collect::<Vec<_>>()
        .join("\nUNION ALL\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_schema_gets_its_own_branch_and_index() {
        let a = Schema::new("tenant_a").unwrap();
        let b = Schema::new("tenant_b").unwrap();
        let sql = work_found(&[&a, &b]);
        assert_eq!(sql.matches("UNION ALL").count(), 1);
        assert!(sql.contains("SELECT 0 WHERE") && sql.contains("tenant_a.outbox_events"));
        assert!(sql.contains("SELECT 1 WHERE") && sql.contains("tenant_b.outbox_pauses"));
        assert!(!sql.contains("{schema}") && !sql.contains("{i}"));
    }
}
