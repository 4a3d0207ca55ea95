//! `promtool check metrics` on an exposition, as Prometheus's own tool
//! reads it.

use std::io::Write;
use std::process::{Command, Stdio};

/// `promtool check metrics` on `text`: `Err` with what it said unless it
/// parsed the exposition and found nothing to lint; `None` without
/// promtool (`.ci/run` installs it). promtool reads the Prometheus text
/// format, where a counter's family is named with its `_total`;
/// OpenMetrics names it without (`# HELP outbox_batches`, sample
/// `outbox_batches_total`), so "no help text" for such a counter is the
/// formats' difference, not a missing HELP: it is let through when the
/// family's HELP and `counter` TYPE are there.
pub fn check_metrics(text: &str) -> Option<Result<(), String>> {
    let Ok(mut child) = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
    else {
        eprintln!("skipped: promtool is not installed (.ci/run installs it)");
        return None;
    };
    child
        .stdin
        .take()
        .expect("promtool's stdin")
        .write_all(text.as_bytes())
        .expect("writing to promtool");
    let out = child.wait_with_output().expect("promtool's answer");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let openmetrics_counter = |line: &str| {
        line.strip_suffix(" no help text")
            .and_then(|sample| sample.strip_suffix("_total"))
            .is_some_and(|family| {
                text.contains(&format!("# HELP {family} "))
                    && text.contains(&format!("# TYPE {family} counter\n"))
            })
    };
    let complaints: Vec<&str> = said
        .lines()
        .filter(|l| !l.trim().is_empty() && !openmetrics_counter(l))
        .collect();
    // 0: clean; 3: lint findings only; anything else: not parsed.
    let parsed = matches!(out.status.code(), Some(0 | 3));
    Some(if parsed && complaints.is_empty() {
        Ok(())
    } else {
        Err(format!("{}: {said}", out.status))
    })
}
