//! The config file: TOML, checked strictly (unknown keys and wrong types are
//! errors naming the file, the line and the key), with the line of every
//! key kept for later messages. Only a regular file of at most
//! [`MAX_BYTES`] is read, and parsing takes time linear in its size.

use std::collections::BTreeMap;
use std::ops::Range;
use std::path::{Path, PathBuf};

use anyhow::{anyhow, Result};
use serde::Deserialize;
use toml::de::{DeTable, DeValue};

use super::model::Config;
use crate::small_file::SmallFile;
use crate::text::{cut, cut_words, one_line};

/// The largest config file read: 1 MiB, far more than any configuration
/// needs, so that a wrong path (a log, a device) fails at once.
pub const MAX_BYTES: u64 = 1024 * 1024;

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
    let text = read_text(path)?;
    parse(path, &text)
}

/// The text of `path`, refused at once unless it is a regular file of at
/// most [`MAX_BYTES`] of UTF-8 ([`SmallFile`]).
fn read_text(path: &Path) -> Result<String> {
    let bytes = SmallFile {
        what: "config file",
        max_bytes: MAX_BYTES,
        fix: "give --config (or OUTBOX_CONFIG) the path of a TOML file",
    }
    .read(path)?;
    String::from_utf8(bytes).map_err(|e| {
        let shown = path.display().to_string();
        let shown = if shown.chars().count() > 80 {
            cut(&shown)
        } else {
            shown
        };
        let (line, col) = line_col(
            &String::from_utf8_lossy(&e.as_bytes()[..e.utf8_error().valid_up_to()]),
            usize::MAX,
        );
        anyhow!("config file {shown}:{line}:{col}: not UTF-8 text: a config file is TOML, which is UTF-8")
    })
}

/// Parses and checks `text`, read from `path`.
pub fn parse(path: &Path, text: &str) -> Result<FileLayer> {
    let shown = path.display();
    let lines_of = LineIndex::new(text);
    let doc = DeTable::parse(text).map_err(|e| {
        let (line, col) = e
            .span()
            .map(|s| lines_of.line_col(s.start))
            .unwrap_or((1, 1));
        anyhow!(
            "config file {shown}:{line}:{col}: invalid TOML: {}",
            cut_words(&one_line(e.message()))
        )
    })?;
    let mut spans = Vec::new();
    collect_spans(doc.get_ref(), "", &mut spans);

    if let Err(e) = Config::deserialize(toml::de::Deserializer::parse(text)?) {
        let at = e.span().map(|s| s.start).unwrap_or(0);
        let (line, _) = lines_of.line_col(at);
        let key = spans
            .iter()
            .filter(|(_, key, value)| contains(key, at) || contains(value, at))
            .map(|(path, _, _)| path.as_str())
            .max_by_key(|p| p.len());
        let message = cut_words(&plain(e.message()));
        return Err(match key {
            Some(key) if !message.contains("unknown key") => {
                anyhow!("config file {shown}:{line}: {}: {message}", cut_words(key))
            }
            Some(key) => {
                let section = key.rsplit_once('.').map(|(s, _)| cut_words(s));
                match section {
                    // An entry of an array of tables: `in source[2]`.
                    Some(s) if s.ends_with(']') => {
                        anyhow!("config file {shown}:{line}: in {s}: {message}")
                    }
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
        .map(|(path, key, _)| (path.clone(), lines_of.line_col(key.start).0))
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
        match value.get_ref() {
            DeValue::Table(inner) => collect_spans(inner, &path, out),
            // `[[source]]` entries: `source[1].name`, counted from 1 as
            // the messages name them.
            DeValue::Array(items) => {
                for (i, item) in items.iter().enumerate() {
                    if let DeValue::Table(inner) = item.get_ref() {
                        let entry = format!("{path}[{}]", i + 1);
                        out.push((entry.clone(), item.span(), item.span()));
                        collect_spans(inner, &entry, out);
                    }
                }
            }
            _ => {}
        }
    }
}

fn contains(span: &Range<usize>, at: usize) -> bool {
    span.start <= at && at < span.end.max(span.start + 1)
}

/// The byte offset where each line of a text starts, found in one pass so
/// that the line of any offset is a binary search: a file with many keys
/// is not rescanned from its start for each one.
struct LineIndex {
    starts: Vec<usize>,
    len: usize,
}

impl LineIndex {
    fn new(text: &str) -> Self {
        let mut starts = vec![0];
        starts.extend(text.match_indices('\n').map(|(i, _)| i + 1));
        LineIndex {
            starts,
            len: text.len(),
        }
    }

    /// 1-based line and column (in bytes) of byte `at`.
    fn line_col(&self, at: usize) -> (usize, usize) {
        let at = at.min(self.len);
        let line = self.starts.partition_point(|&start| start <= at);
        (line, at - self.starts[line - 1] + 1)
    }
}

/// 1-based line and column of byte `at` of `text`.
fn line_col(text: &str, at: usize) -> (usize, usize) {
    LineIndex::new(text).line_col(at)
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

    #[test]
    fn line_index_agrees_with_counting() {
        let text = "a = 1\n\n[b]\nc = \"é\"\nd = 2";
        for at in 0..=text.len() + 3 {
            let before = &text.as_bytes()[..at.min(text.len())];
            let line = before.iter().filter(|&&b| b == b'\n').count() + 1;
            let col = before.len()
                - before
                    .iter()
                    .rposition(|&b| b == b'\n')
                    .map_or(0, |i| i + 1)
                + 1;
            assert_eq!(line_col(text, at), (line, col), "at {at}");
        }
    }

    /// Many keys cost time in proportion: the line of each key is looked up,
    /// not counted from the start of the file.
    #[test]
    fn a_hundred_thousand_keys_parse_in_linear_time() {
        let keys = 100_000;
        let mut text =
            String::from("[publisher]\nspec = \"kafka://k:9092\"\n[publisher.kafka.properties]\n");
        for i in 0..keys {
            text.push_str(&format!("\"p.{i}\" = \"v\"\n"));
        }
        let started = std::time::Instant::now();
        let f = parse(Path::new("many.toml"), &text).unwrap();
        let took = started.elapsed();
        assert_eq!(f.lines["publisher.kafka.properties.p.99999"], keys + 3);
        // Linear work takes about a second unoptimised; the quadratic
        // version took minutes.
        assert!(took < std::time::Duration::from_secs(60), "{took:?}");
    }

    #[test]
    fn only_small_regular_files_are_read() {
        let dir = tempfile::tempdir().unwrap();
        for (path, what) in [
            (Path::new("/dev/zero"), "character device"),
            (Path::new("/dev/urandom"), "character device"),
            (dir.path(), "directory"),
        ] {
            let e = read(path).unwrap_err().to_string();
            assert!(e.contains(what) && e.contains("--config"), "{e}");
        }
        let big = dir.path().join("big.toml");
        std::fs::write(&big, "#".repeat(MAX_BYTES as usize + 1)).unwrap();
        let e = read(&big).unwrap_err().to_string();
        assert!(e.contains("1048577 bytes") && e.contains("1 MiB"), "{e}");
        let binary = dir.path().join("binary.toml");
        std::fs::write(&binary, b"schema = \"a\"\n\xff\xfe").unwrap();
        let e = read(&binary).unwrap_err().to_string();
        assert!(e.contains(":2:1") && e.contains("UTF-8"), "{e}");
        let ok = dir.path().join("ok.toml");
        std::fs::write(&ok, "#".repeat(MAX_BYTES as usize)).unwrap();
        read(&ok).unwrap();
    }
}
