//! Printing the effective configuration, secrets redacted, each value
//! followed by where it came from.

use std::fmt::Write;

use outbox::redact::{is_secret_key, mask_text, REDACTED};

use super::keys::KEYS;
use super::Loaded;

/// Hides URL passwords and `password=…` parameters in strings, and the
/// values of secret keys. Strings are otherwise kept as they are: TOML and
/// JSON escape control characters themselves, and `config check` prints a
/// file that can be used as it is.
fn redact(value: &mut toml::Value) {
    match value {
        toml::Value::String(s) => *s = mask_text(s),
        toml::Value::Array(items) => items.iter_mut().for_each(redact),
        toml::Value::Table(t) => redact_table(t),
        _ => {}
    }
}

fn redact_table(table: &mut toml::Table) {
    for (key, value) in table.iter_mut() {
        // A secret is hidden whatever its type: a table or an array under
        // `sasl.password` is as secret as a string.
        if is_secret_key(key) {
            *value = toml::Value::String(REDACTED.to_owned());
        } else {
            redact(value);
        }
    }
}

/// The effective configuration as a table, secrets redacted.
fn redacted_table(l: &Loaded) -> toml::Table {
    let mut table = toml::Table::try_from(&l.config).unwrap_or_default();
    redact_table(&mut table);
    table
}

/// The effective configuration as one line of JSON, secrets redacted (for
/// a debug log line).
pub fn redacted_json(l: &Loaded) -> String {
    serde_json::to_string(&redacted_table(l)).unwrap_or_default()
}

fn lookup<'a>(table: &'a toml::Table, path: &str) -> Option<&'a toml::Value> {
    match path.split_once('.') {
        None => table.get(path),
        Some((head, rest)) => lookup(table.get(head)?.as_table()?, rest),
    }
}

/// The effective configuration as TOML that could be used as a config
/// file, each key commented with its origin; unset keys are commented out.
pub fn render(l: &Loaded) -> String {
    let table = redacted_table(l);
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# effective configuration: flags > environment > {} > defaults",
        l.file
            .as_ref()
            .map(|p| p.display().to_string())
            .unwrap_or_else(|| "config file (none)".to_owned())
    );
    let _ = writeln!(
        out,
        "# publisher.spec forms: {}",
        outbox_publishers::registry::forms().trim_start_matches("use ")
    );
    let mut section = "";
    for key in KEYS {
        let (sect, name) = key.path.rsplit_once('.').unwrap_or(("", key.path));
        if sect != section {
            let _ = writeln!(out, "\n[{sect}]");
            section = sect;
        }
        let origin = l.origin(key.path).describe();
        let line = match lookup(&table, key.path) {
            // With `[[source]]` entries each names its own schema (a
            // `schema` set in the file or environment was refused).
            Some(v) if key.path == "schema" && !l.config.source.is_empty() => {
                format!("# {name} = {v} (each [[source]] names its schema)")
            }
            Some(v) => format!("{name} = {v}"),
            None => format!("# {name} = (unset)"),
        };
        let _ = writeln!(out, "{line:<40} # {origin}");
    }
    for broker in outbox_publishers::registry::table_names() {
        if let Some(t) = lookup(&table, &format!("publisher.{broker}")).and_then(|v| v.as_table()) {
            let mut wrapped = toml::Table::new();
            let mut inner = toml::Table::new();
            inner.insert(broker.to_owned(), toml::Value::Table(t.clone()));
            wrapped.insert("publisher".to_owned(), toml::Value::Table(inner));
            let _ = writeln!(
                out,
                "\n# passed to the {broker} publisher as it is ({})",
                l.origin(&format!("publisher.{broker}")).describe()
            );
            out.push_str(&toml::to_string(&wrapped).unwrap_or_default());
        }
    }
    render_sources(l, &table, &mut out);
    out
}

/// The order `[[source]]` keys are printed in.
const SOURCE_KEY_ORDER: [&str; 7] = [
    "name",
    "database_url",
    "schema",
    "schemas",
    "batch_size",
    "max_attempts",
    "publisher",
];

/// The `[[source]]` entries, secrets redacted, each key with its origin; a
/// table-valued key (a publisher) follows as `[source.KEY]`, which belongs
/// to the entry above it.
fn render_sources(l: &Loaded, table: &toml::Table, out: &mut String) {
    let entries = table.get("source").and_then(|v| v.as_array());
    for (i, entry) in entries.into_iter().flatten().enumerate() {
        let Some(entry) = entry.as_table() else {
            continue;
        };
        let at = format!("source[{}]", i + 1);
        let _ = writeln!(
            out,
            "\n{:<40} # {at}, {}",
            "[[source]]",
            l.origin(&at).describe()
        );
        let mut tables = toml::Table::new();
        let mut keys: Vec<&String> = entry.keys().collect();
        keys.sort_by_key(|k| SOURCE_KEY_ORDER.iter().position(|o| o == k));
        for key in keys {
            let value = &entry[key];
            if value.is_table() {
                tables.insert(key.clone(), value.clone());
                continue;
            }
            let origin = l.origin(&format!("{at}.{key}")).describe();
            let _ = writeln!(out, "{:<40} # {origin}", format!("{key} = {value}"));
        }
        for (key, value) in tables {
            let _ = writeln!(
                out,
                "# {at}.{key} ({})",
                l.origin(&format!("{at}.{key}")).describe()
            );
            let mut inner = toml::Table::new();
            inner.insert(key, value);
            let mut wrapped = toml::Table::new();
            wrapped.insert("source".to_owned(), toml::Value::Table(inner));
            out.push_str(&toml::to_string(&wrapped).unwrap_or_default());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_hidden() {
        let mut t: toml::Table = toml::from_str(
            "url = \"amqp://u:hunter2@h/v\"\n[properties]\n\"sasl.password\" = \"hunter2\"\n\"linger.ms\" = \"5\"\n",
        )
        .unwrap();
        redact_table(&mut t);
        let text = toml::to_string(&t).unwrap();
        assert!(!text.contains("hunter2"), "{text}");
        assert!(text.contains("linger.ms"), "{text}");
    }

    #[test]
    fn secrets_of_any_type_and_any_form_are_hidden() {
        let mut t: toml::Table = toml::from_str(
            r#"
            database_url = "host=db password='hunter 2' dbname=x"
            other = "postgres://u@db/x?sslpassword=hunter2"
            urls = ["amqps://u:hun ter2@h/v"]
            [properties]
            "sasl.password" = { v = "hunter2" }
            "ssl.key.password" = ["hunter2"]
            api_key = 12345
            key_template = "{event_type}"
            "#,
        )
        .unwrap();
        redact_table(&mut t);
        let text = toml::to_string(&t).unwrap();
        assert!(
            !text.contains("hunter") && !text.contains("12345"),
            "{text}"
        );
        assert!(text.contains("key_template = \"{event_type}\""), "{text}");
    }
}
