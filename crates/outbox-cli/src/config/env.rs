//! Settings from environment variables (`OUTBOX_RELAY_BATCH_SIZE`, …, and
//! `DATABASE_URL`). A bad value is an error naming the variable.

use std::collections::BTreeMap;
use std::ffi::OsString;

use anyhow::{anyhow, bail, Result};

use super::keys::{Kind, KEYS, RESERVED_ENV_PREFIXES};
use super::model::Config;
use super::set_path;
use crate::text::cut;

/// The settings found in the environment.
#[derive(Debug, Clone, Default)]
pub struct EnvLayer {
    /// Values by dotted key.
    pub table: toml::Table,
    /// The variable each key came from.
    pub vars: BTreeMap<String, String>,
}

/// Reads the process environment.
pub fn read() -> Result<EnvLayer> {
    from_vars(std::env::vars_os())
}

/// Reads settings from `vars`. An empty variable counts as unset.
pub fn from_vars(vars: impl IntoIterator<Item = (OsString, OsString)>) -> Result<EnvLayer> {
    let mut env: BTreeMap<String, String> = BTreeMap::new();
    for (name, value) in vars {
        let Some(name) = name.to_str().map(str::to_owned) else {
            continue;
        };
        let is_ours = KEYS.iter().any(|k| k.env.contains(&name.as_str()))
            || RESERVED_ENV_PREFIXES.iter().any(|p| name.starts_with(p));
        if !is_ours {
            continue;
        }
        let value = value
            .into_string()
            .map_err(|_| anyhow!("invalid {name}: the value is not valid UTF-8"))?;
        env.insert(name, value);
    }

    for name in env.keys() {
        if !KEYS.iter().any(|k| k.env.contains(&name.as_str())) {
            let prefix = RESERVED_ENV_PREFIXES
                .iter()
                .find(|p| name.starts_with(*p))
                .copied()
                .unwrap_or("OUTBOX_");
            let known: Vec<&str> = KEYS
                .iter()
                .flat_map(|k| k.env.iter().copied())
                .filter(|v| v.starts_with(prefix))
                .collect();
            bail!(
                "unknown environment variable {name}: the {prefix}* variables are {}",
                known.join(", ")
            );
        }
    }

    let mut layer = EnvLayer::default();
    for key in KEYS {
        let Some((var, text)) = key
            .env
            .iter()
            .find_map(|v| env.get(*v).filter(|t| !t.is_empty()).map(|t| (*v, t)))
        else {
            continue;
        };
        let value = to_value(key.kind, text).map_err(|expected| {
            anyhow!(
                "invalid {var}={}: expected {expected} (sets {})",
                shown(var, text),
                key.path
            )
        })?;
        // Check the value's type against the schema on its own, so the
        // error names the variable rather than the merged key.
        let mut probe = toml::Table::new();
        set_path(&mut probe, key.path, value.clone());
        if let Err(e) = probe.try_into::<Config>() {
            let message = crate::text::cut_words(&crate::text::one_line(&e.to_string()));
            let message = match message.rsplit_once(" in `") {
                Some((head, _)) => head.to_owned(),
                None => message,
            };
            bail!(
                "invalid {var}={}: {message} (sets {})",
                shown(var, text),
                key.path
            );
        }
        set_path(&mut layer.table, key.path, value);
        layer.vars.insert(key.path.to_owned(), var.to_owned());
    }
    Ok(layer)
}

fn to_value(kind: Kind, text: &str) -> std::result::Result<toml::Value, &'static str> {
    let t = text.trim();
    match kind {
        Kind::Str => Ok(toml::Value::String(text.to_owned())),
        Kind::Int => t
            .parse::<i64>()
            .ok()
            .filter(|n| *n >= 0)
            .map(toml::Value::Integer)
            .ok_or("a whole number"),
        Kind::Bool => match t.to_ascii_lowercase().as_str() {
            "true" | "1" | "yes" | "on" => Ok(toml::Value::Boolean(true)),
            "false" | "0" | "no" | "off" => Ok(toml::Value::Boolean(false)),
            _ => Err("true or false"),
        },
    }
}

/// The value as it may be shown: URLs lose their password, long values
/// are cut.
fn shown(var: &str, text: &str) -> String {
    if var.contains("URL") {
        cut(&crate::db::redact_text(text))
    } else {
        cut(text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(pairs: &[(&str, &str)]) -> Vec<(OsString, OsString)> {
        pairs
            .iter()
            .map(|(k, v)| (OsString::from(k), OsString::from(v)))
            .collect()
    }

    #[test]
    fn variables_become_keys() {
        let l = from_vars(vars(&[
            ("OUTBOX_RELAY_BATCH_SIZE", "42"),
            ("OUTBOX_RELAY_LISTEN", "off"),
            ("OUTBOX_PUBLISHER", "file:/tmp/x"),
            ("DATABASE_URL", "postgres://a@b/c"),
            ("OUTBOX_HTTP_ADDR", ""),
            ("OUTBOX_PG_BIN_DIR", "/usr/lib"),
            ("PATH", "/bin"),
        ]))
        .unwrap();
        assert_eq!(l.table["relay"]["batch_size"].as_integer(), Some(42));
        assert_eq!(l.table["relay"]["listen"].as_bool(), Some(false));
        assert_eq!(l.table["publisher"]["spec"].as_str(), Some("file:/tmp/x"));
        assert_eq!(l.vars["database_url"], "DATABASE_URL");
        assert!(l.table.get("http").is_none(), "empty means unset");
    }

    #[test]
    fn outbox_database_url_wins_over_database_url() {
        let l = from_vars(vars(&[
            ("DATABASE_URL", "postgres://a@b/one"),
            ("OUTBOX_DATABASE_URL", "postgres://a@b/two"),
        ]))
        .unwrap();
        assert_eq!(l.table["database_url"].as_str(), Some("postgres://a@b/two"));
    }

    #[test]
    fn bad_values_name_the_variable() {
        let e = from_vars(vars(&[("OUTBOX_RELAY_BATCH_SIZE", "ten")]))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("OUTBOX_RELAY_BATCH_SIZE")
                && e.contains("ten")
                && e.contains("whole number"),
            "{e}"
        );
        let e = from_vars(vars(&[("OUTBOX_RELAY_RETENTION", "forever")]))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("OUTBOX_RELAY_RETENTION") && e.contains("forever") && e.contains("keep"),
            "{e}"
        );
        let e = from_vars(vars(&[("OUTBOX_RELAY_MAX_ATTEMPTS", "9999999999")]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("OUTBOX_RELAY_MAX_ATTEMPTS"), "{e}");
        let e = from_vars(vars(&[("OUTBOX_RELAY_BATCH_SISE", "1")]))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("OUTBOX_RELAY_BATCH_SISE") && e.contains("OUTBOX_RELAY_BATCH_SIZE"),
            "{e}"
        );
    }

    #[test]
    fn passwords_stay_out_of_errors() {
        let e = from_vars(vars(&[
            ("OUTBOX_HTTP_ADDR", "x"),
            ("OUTBOX_DRAIN", "maybe"),
        ]))
        .unwrap_err()
        .to_string();
        assert!(e.contains("OUTBOX_DRAIN"), "{e}");
        assert_eq!(
            shown("DATABASE_URL", "postgres://u:pw@h/d"),
            "\"postgres://u:***@h/d\""
        );
    }
}
