//! What the tests of `deploy/` share: where the repository is, the real
//! tools they run (skipped, with a message, only where one is missing:
//! `.ci/run` installs them), YAML, and plain HTTP to a Go server.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The repository's root.
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The text of `path`, relative to the repository's root.
pub fn read(path: &str) -> String {
    let full = repo().join(path);
    std::fs::read_to_string(&full).unwrap_or_else(|e| panic!("reading {}: {e}", full.display()))
}

/// `path` (relative to the repository's root) parsed as YAML.
pub fn yaml(path: &str) -> serde_yaml::Value {
    serde_yaml::from_str(&read(path)).unwrap_or_else(|e| panic!("{path} is not YAML: {e}"))
}

/// Where `name` is installed: on `PATH`, or in `also` (directories the
/// Debian package puts it in off `PATH`). `None`, said on stderr, where it
/// is missing.
pub fn tool(name: &str, also: &[&str]) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let found = std::env::split_paths(&path)
        .chain(also.iter().map(PathBuf::from))
        .map(|dir| dir.join(name))
        .find(|p| p.is_file());
    if found.is_none() {
        eprintln!("skipped: {name} is not installed (.ci/run installs it)");
    }
    found
}

/// Runs `cmd`, which must succeed; its output.
pub fn run_ok(cmd: &mut Command) -> Output {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("running {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed ({})\n--- stdout ---\n{}\n--- stderr ---\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// The `[workspace.package] repository` URL of Cargo.toml: what runbook
/// links start with.
pub fn repository_url() -> String {
    let manifest: toml::Table = read("Cargo.toml").parse().unwrap();
    manifest["workspace"]["package"]["repository"]
        .as_str()
        .expect("workspace.package.repository")
        .to_owned()
}

/// The anchors GitHub gives the headings of the Markdown `text`.
pub fn anchors(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|l| {
            l.trim_start_matches('#')
                .strip_prefix(' ')
                .filter(|_| l.starts_with('#'))
        })
        .map(|h| {
            h.trim()
                .to_lowercase()
                .chars()
                .filter_map(|c| match c {
                    ' ' => Some('-'),
                    c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
                    _ => None,
                })
                .collect()
        })
        .collect()
}

/// `s` percent-encoded for a URL's query.
pub fn query_encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}
