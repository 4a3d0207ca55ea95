//! The config file: TOML, checked strictly (unknown keys and wrong types are
//! errors naming the file, the line and the key), with the line of every
//! key kept for later messages.

use std::collections::BTreeMap;
use std::ops::Range;
use std::path::{Path, PathBuf};

use anyhow::{anyhow, Result};
use serde::Deserialize;
use toml::de::{DeTable, DeValue};

use super::model::Config;

/// A parsed config file.
#[derive(Debug, Clone)]
pub struct FileLayer {
    /// Where it was read from.
    pub path: PathBuf,
    /// Its settings, with `publisher = "…"` turned into `publisher.spec`.
    pub table: toml::Table,
    /// The line of each dotted key.
    pub lines: BTreeMap<String, usize>,
}

/// Reads and checks `path`.
pub fn read(path: &Path) -> Result<FileLayer> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| anyhow!("cannot read config file {}: {e}", path.display()))?;
    parse(path, &text)
}

/// Parses and checks `text`, read from `path`.
pub fn parse(path: &Path, text: &str) -> Result<FileLayer> {
    let shown = path.display();
    let doc = DeTable::parse(text).map_err(|e| {
        let (line, col) = e.span().map(|s| line_col(text, s.start)).unwrap_or((1, 1));
        anyhow!(
            "config file {shown}:{line}:{col}: invalid TOML: {}",
            one_line(e.message())
        )
    })?;
    let mut spans = Vec::new();
    collect_spans(doc.get_ref(), "", &mut spans);

    if let Err(e) = Config::deserialize(toml::de::Deserializer::parse(text)?) {
        let at = e.span().map(|s| s.start).unwrap_or(0);
        let (line, _) = line_col(text, at);
        let key = spans
            .iter()
            .filter(|(_, key, value)| contains(key, at) || contains(value, at))
            .map(|(path, _, _)| path.as_str())
            .max_by_key(|p| p.len());
        let message = plain(e.message());
        return Err(match key {
            Some(key) if !message.contains("unknown key") => {
                anyhow!("config file {shown}:{line}: {key}: {message}")
            }
            Some(key) => {
                let section = key.rsplit_once('.').map(|(s, _)| s);
                match section {
                    Some(s) => anyhow!("config file {shown}:{line}: in [{s}]: {message}"),
                    None => anyhow!("config file {shown}:{line}: {message}"),
                }
            }
            None => anyhow!("config file {shown}:{line}: {message}"),
        });
    }

    let mut table: toml::Table = toml::from_str(text)?;
    let mut lines: BTreeMap<String, usize> = spans
        .iter()
        .map(|(path, key, _)| (path.clone(), line_col(text, key.start).0))
        .collect();
    if let Some(toml::Value::String(spec)) = table.get("publisher").cloned() {
        let mut t = toml::Table::new();
        t.insert("spec".into(), toml::Value::String(spec));
        table.insert("publisher".into(), toml::Value::Table(t));
        if let Some(line) = lines.get("publisher").copied() {
            lines.insert("publisher.spec".into(), line);
        }
    }
    Ok(FileLayer {
        path: path.to_path_buf(),
        table,
        lines,
    })
}

/// (dotted path, key span, value span) of every key in the document.
fn collect_spans(
    table: &DeTable<'_>,
    prefix: &str,
    out: &mut Vec<(String, Range<usize>, Range<usize>)>,
) {
    for (key, value) in table {
        let path = if prefix.is_empty() {
            key.get_ref().to_string()
        } else {
            format!("{prefix}.{}", key.get_ref())
        };
        out.push((path.clone(), key.span(), value.span()));
        if let DeValue::Table(inner) = value.get_ref() {
            collect_spans(inner, &path, out);
        }
    }
}

fn contains(span: &Range<usize>, at: usize) -> bool {
    span.start <= at && at < span.end.max(span.start + 1)
}

/// 1-based line and column of byte `at`.
fn line_col(text: &str, at: usize) -> (usize, usize) {
    let before = &text[..at.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let col = before.len() - before.rfind('\n').map_or(0, |i| i + 1) + 1;
    (line, col)
}

fn one_line(message: &str) -> String {
    message.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// serde's wording, in the words of a config file.
fn plain(message: &str) -> String {
    one_line(message)
        .replace("unknown field", "unknown key")
        .replace("expected usize", "expected a whole number")
        .replace("expected u64", "expected a whole number")
        .replace("expected u32", "expected a whole number")
        .replace("expected one of", "allowed keys:")
        .replace(", expected", "; expected")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(text: &str) -> String {
        parse(Path::new("/etc/outbox.toml"), text)
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn unknown_keys_name_the_file_the_line_and_the_section() {
        let e = err("schema = \"app\"\n\n[relay]\nbatch_sise = 3\n");
        assert!(e.contains("/etc/outbox.toml:4"), "{e}");
        assert!(e.contains("[relay]") && e.contains("batch_sise"), "{e}");
        assert!(e.contains("batch_size"), "the allowed keys are listed: {e}");
        let e = err("databse_url = \"x\"\n");
        assert!(e.contains(":1") && e.contains("databse_url"), "{e}");
    }

    #[test]
    fn wrong_types_name_the_key_and_the_value() {
        let e = err("[relay]\n\nbatch_size = \"lots\"\n");
        assert!(e.contains(":3") && e.contains("relay.batch_size"), "{e}");
        assert!(e.contains("lots") && e.contains("whole number"), "{e}");
        let e = err("[log]\nformat = \"xml\"\n");
        assert!(
            e.contains("log.format") && e.contains("xml") && e.contains("json"),
            "{e}"
        );
    }

    #[test]
    fn syntax_errors_have_a_position_and_fit_on_one_line() {
        let e = err("schema = \n");
        assert!(e.contains("/etc/outbox.toml:1:"), "{e}");
        assert_eq!(e.lines().count(), 1, "{e}");
    }

    #[test]
    fn lines_are_kept_and_the_publisher_string_becomes_a_spec() {
        let f = parse(
            Path::new("x.toml"),
            "publisher = \"stdout\"\n[relay]\nbatch_size = 5\n",
        )
        .unwrap();
        assert_eq!(f.lines["publisher.spec"], 1);
        assert_eq!(f.lines["relay.batch_size"], 3);
        assert_eq!(f.table["publisher"]["spec"].as_str(), Some("stdout"));
    }
}
