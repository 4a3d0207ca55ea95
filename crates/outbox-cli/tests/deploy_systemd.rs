//! `deploy/systemd/outbox-relay.service` checked by the real tools:
//! `systemd-analyze verify` finds nothing to say about it,
//! `systemd-analyze security` rates it well hardened, and its command line
//! (with the shipped example config and environment file) passes `outbox
//! config check`, with a stop timeout longer than the relay's own.

mod common;
mod deploy_support;

use std::process::Command;

use deploy_support::{read, repo, run_ok, tool};

const UNIT: &str = "deploy/systemd/outbox-relay.service";

/// Every `key=value` of the unit, in order (comments left out).
fn directives() -> Vec<(String, String)> {
    read(UNIT)
        .lines()
        .filter(|l| !l.starts_with('#') && !l.starts_with('['))
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned()))
        .collect()
}

fn directive(key: &str) -> Vec<String> {
    directives()
        .into_iter()
        .filter(|(k, _)| k == key)
        .map(|(_, v)| v)
        .collect()
}

/// The unit with `ExecStart` running the binary under test, in a
/// temporary directory: (directory, path of the unit).
fn unit_with_the_built_binary() -> (tempfile::TempDir, std::path::PathBuf) {
    let text = read(UNIT).replace("/usr/local/bin/outbox", env!("CARGO_BIN_EXE_outbox"));
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("outbox-relay.service");
    std::fs::write(&path, text).unwrap();
    (dir, path)
}

#[test]
fn systemd_analyze_verify_has_nothing_to_say_about_the_unit() {
    let Some(analyze) = tool("systemd-analyze", &[]) else {
        return;
    };
    let (_dir, unit) = unit_with_the_built_binary();
    let out = run_ok(Command::new(&analyze).arg("verify").arg(&unit));
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.trim().is_empty(), "systemd-analyze verify: {said}");
}

#[test]
fn the_unit_is_hardened() {
    let one = |key: &str| directive(key).join(" ");
    assert_eq!(one("DynamicUser"), "yes");
    assert_eq!(one("NoNewPrivileges"), "yes");
    assert_eq!(one("ProtectSystem"), "strict");
    assert_eq!(one("Restart"), "on-failure");
    assert_eq!(one("EnvironmentFile"), "/etc/outbox/relay.env");
    assert_eq!(one("CapabilityBoundingSet"), "");
    let Some(analyze) = tool("systemd-analyze", &[]) else {
        return;
    };
    let (_dir, unit) = unit_with_the_built_binary();
    // Exposure is rated 0.0 (locked down) to 10.0; the threshold is in
    // tenths: fail above 2.0.
    let out = run_ok(
        Command::new(&analyze)
            .args(["security", "--offline=true", "--threshold=20", "--no-pager"])
            .arg(&unit),
    );
    let said = String::from_utf8_lossy(&out.stdout);
    let overall = said
        .lines()
        .find(|l| l.contains("Overall exposure level"))
        .unwrap_or_else(|| panic!("no overall exposure in {said}"));
    eprintln!("{overall}");
}

#[test]
fn the_units_command_line_passes_config_check_and_outlasts_the_shutdown_timeout() {
    let exec = directive("ExecStart").pop().expect("ExecStart");
    let mut argv: Vec<String> = exec.split_whitespace().map(str::to_owned).collect();
    assert_eq!(argv.remove(0), "/usr/local/bin/outbox");
    let config = repo().join("deploy/systemd/outbox.toml");
    for arg in &mut argv {
        if arg == "/etc/outbox/outbox.toml" {
            *arg = config.display().to_string();
        }
    }
    let relay = argv
        .iter()
        .position(|a| a == "relay")
        .expect("runs the relay");
    argv.splice(relay..=relay, ["config".to_owned(), "check".to_owned()]);

    let mut cmd = common::bin();
    cmd.env_remove("OUTBOX_CONFIG").args(&argv);
    // The example secrets file, and the unit's own environment (%H is the
    // host name).
    for line in read("deploy/systemd/relay.env.example").lines() {
        if let Some((k, v)) = line.split_once('=').filter(|_| !line.starts_with('#')) {
            cmd.env(k, v);
        }
    }
    for env in directive("Environment") {
        let (k, v) = env.split_once('=').unwrap();
        cmd.env(k, v.replace("%H", "relay-host-1"));
    }
    let out = run_ok(&mut cmd);
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(shown.contains("instance_id = \"relay-host-1\""), "{shown}");
    assert!(shown.contains("addr = \"127.0.0.1:9090\""), "{shown}");
    assert!(
        !shown.contains("change-me"),
        "the password is redacted: {shown}"
    );

    let shutdown: u64 = shown
        .lines()
        .find_map(|l| l.strip_prefix("shutdown_timeout_secs = "))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("no shutdown_timeout_secs in {shown}"));
    let stop = directive("TimeoutStopSec").pop().expect("TimeoutStopSec");
    let stop: u64 = stop.trim_end_matches('s').parse().unwrap();
    // The relay exits by itself 2 s after its shutdown timeout.
    assert!(
        stop > shutdown + 2,
        "TimeoutStopSec={stop}s must exceed shutdown_timeout_secs={shutdown} + 2"
    );
}
