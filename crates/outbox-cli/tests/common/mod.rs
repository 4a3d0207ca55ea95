//! Helpers for tests that run the `outbox` program as a child process.
#![allow(dead_code)]

use std::path::Path;
use std::process::{Child, Command, Output, Stdio};

use outbox::NewEvent;

pub fn bin() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_outbox"));
    cmd.env_remove("DATABASE_URL").env_remove("RUST_LOG");
    cmd
}

pub fn run(args: &[&str], url: Option<&str>) -> Output {
    let mut cmd = bin();
    cmd.args(args);
    if let Some(url) = url {
        cmd.env("DATABASE_URL", url);
    }
    cmd.output().expect("run outbox")
}

/// The `--batch-size` of relays started by [`spawn_relay`].
pub const BATCH_SIZE: usize = 200;

/// What one crash of such a relay may deliver again: the batch delivered but
/// not yet acknowledged (its acknowledgement rides on the next claim) plus
/// the batch being published.
pub const IN_FLIGHT_WINDOW: usize = 2 * BATCH_SIZE;

/// Starts `outbox relay` publishing to the JSON-lines file `file`.
pub fn spawn_relay(url: &str, file: &Path, instance: &str, extra: &[&str]) -> Child {
    bin()
        .env("DATABASE_URL", url)
        .args([
            "relay",
            "--publisher",
            &format!("file:{}", file.display()),
            "--instance-id",
            instance,
            "--batch-size",
            &BATCH_SIZE.to_string(),
            "--lease-ms",
            "1500",
            "--poll-max-ms",
            "50",
        ])
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn relay")
}

/// Event `n` of aggregate `agg`.
pub fn event(agg: &str, n: i64) -> NewEvent {
    NewEvent::json("order", agg, "order.updated", serde_json::json!({ "n": n }))
}

/// A delivered line: (event id, aggregate id, position).
pub fn read_deliveries(file: &Path) -> Vec<(String, String, i64)> {
    let text = std::fs::read_to_string(file).unwrap_or_default();
    text.lines()
        .map(|line| {
            let v: serde_json::Value =
                serde_json::from_str(line).unwrap_or_else(|e| panic!("corrupt line {line:?}: {e}"));
            (
                v["id"].as_str().unwrap().to_owned(),
                v["aggregate_id"].as_str().unwrap().to_owned(),
                v["payload"]["n"].as_i64().unwrap(),
            )
        })
        .collect()
}

/// Asserts every id in `expected` was delivered, nothing else was, and
/// first deliveries kept per-aggregate order; returns (deliveries,
/// duplicates).
pub fn check_deliveries(file: &Path, expected: &[uuid::Uuid]) -> (usize, usize) {
    let got = read_deliveries(file);
    let got: Vec<(uuid::Uuid, &str, i64)> = got
        .iter()
        .map(|(id, a, n)| (id.parse().expect("an event id"), a.as_str(), *n))
        .collect();
    let dups = outbox_testkit::assert_delivered_once_in_order("", expected, &got);
    (got.len(), dups)
}
