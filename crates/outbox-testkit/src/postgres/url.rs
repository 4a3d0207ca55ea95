//! Connection URLs of test databases.

/// `url` with its database (path) replaced by `db`, keeping any query string.
pub(super) fn with_database(url: &str, db: &str) -> String {
    let (base, query) = url.split_at(url.find('?').unwrap_or(url.len()));
    let authority_start = base.find("://").map_or(0, |i| i + 3);
    let base = match base[authority_start..].find('/') {
        Some(slash) => &base[..authority_start + slash],
        None => base,
    };
    format!("{base}/{db}{query}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn with_database_replaces_the_path() {
        assert_eq!(
            with_database("postgres://u:p@h:5432/app", "t_1"),
            "postgres://u:p@h:5432/t_1"
        );
        assert_eq!(with_database("postgres://h", "t_1"), "postgres://h/t_1");
        assert_eq!(
            with_database("postgresql://h/app?sslmode=disable", "t_1"),
            "postgresql://h/t_1?sslmode=disable"
        );
        assert_eq!(
            with_database("postgres://h?sslmode=disable", "t_1"),
            "postgres://h/t_1?sslmode=disable"
        );
    }
}
