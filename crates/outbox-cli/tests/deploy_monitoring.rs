//! `deploy/monitoring/` checked by the real tools, without a relay:
//! `promtool check rules` and the rules' unit tests (`promtool test
//! rules`), every alert's annotations and runbook section, and the
//! dashboard's variables and metrics. `deploy_prometheus.rs` evaluates
//! them against a running relay.

mod deploy_support;

use std::collections::BTreeSet;
use std::process::Command;

use deploy_support::{anchors, read, repo, repository_url, run_ok, tool, yaml};

const RULES: &str = "deploy/monitoring/outbox.rules.yml";
const RULE_TESTS: &str = "deploy/monitoring/outbox.rules.test.yml";
const DASHBOARD: &str = "deploy/monitoring/outbox-dashboard.json";

/// Every alerting rule of the rules file.
fn alerts() -> Vec<serde_yaml::Value> {
    let rules = yaml(RULES);
    rules["groups"]
        .as_sequence()
        .unwrap()
        .iter()
        .flat_map(|g| g["rules"].as_sequence().unwrap().clone())
        .filter(|r| r.get("alert").is_some())
        .collect()
}

/// The `outbox_*` metric names `expr` reads.
fn metric_names(expr: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut rest = expr;
    while let Some(at) = rest.find("outbox_") {
        let preceded = expr.len() - rest.len() + at;
        let name: String = rest[at..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        // Not the tail of a recording rule's name (`outbox:…`).
        if preceded == 0 || !expr.as_bytes()[preceded - 1].is_ascii_alphanumeric() {
            names.insert(name.clone());
        }
        rest = &rest[at + name.len()..];
    }
    names
}

#[test]
fn the_rules_pass_promtool_check_and_their_unit_tests() {
    let Some(promtool) = tool("promtool", &[]) else {
        return;
    };
    let out = run_ok(
        Command::new(&promtool)
            .arg("check")
            .arg("rules")
            .arg(repo().join(RULES)),
    );
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(said.contains("SUCCESS"), "{said}");
    let out = run_ok(
        Command::new(&promtool)
            .args(["test", "rules", "outbox.rules.test.yml"])
            .current_dir(repo().join("deploy/monitoring")),
    );
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(said.contains("SUCCESS"), "{said}");
}

#[test]
fn every_alert_has_a_unit_test_that_sees_it_fire_and_one_that_sees_it_silent() {
    let tests = yaml(RULE_TESTS);
    let cases: Vec<&serde_yaml::Value> = tests["tests"]
        .as_sequence()
        .unwrap()
        .iter()
        .flat_map(|t| t["alert_rule_test"].as_sequence().unwrap())
        .collect();
    for alert in alerts() {
        let name = alert["alert"].as_str().unwrap();
        let of_it: Vec<_> = cases
            .iter()
            .filter(|c| c["alertname"].as_str() == Some(name))
            .collect();
        let fires = of_it
            .iter()
            .any(|c| !c["exp_alerts"].as_sequence().unwrap().is_empty());
        let silent = of_it
            .iter()
            .any(|c| c["exp_alerts"].as_sequence().unwrap().is_empty());
        assert!(
            fires && silent,
            "{name}: fires tested {fires}, silent tested {silent}"
        );
    }
}

#[test]
fn every_alert_says_what_is_wrong_and_links_a_runbook_section_that_exists() {
    let base = format!("{}/blob/main/docs/operations.md#", repository_url());
    let sections = anchors(&read("docs/operations.md"));
    let alerts = alerts();
    assert!(alerts.len() >= 8, "{} alerts", alerts.len());
    for alert in alerts {
        let name = alert["alert"].as_str().unwrap();
        let notes = &alert["annotations"];
        for key in ["summary", "description"] {
            let text = notes[key].as_str().unwrap_or_default();
            assert!(text.len() > 20, "{name}: {key} {text:?}");
        }
        let description = notes["description"].as_str().unwrap();
        assert!(
            description.contains("First: `"),
            "{name}: the description names the first command to run: {description}"
        );
        let url = notes["runbook_url"].as_str().unwrap_or_default();
        let anchor = url
            .strip_prefix(&base)
            .unwrap_or_else(|| panic!("{name}: runbook_url {url:?} is not under {base}"));
        assert_eq!(anchor, name.to_lowercase(), "{name}: one section per alert");
        assert!(
            sections.iter().any(|s| s == anchor),
            "{name}: docs/operations.md has no section #{anchor}"
        );
        assert!(alert["labels"]["severity"].as_str().is_some(), "{name}");
    }
}

#[test]
fn every_alert_about_a_source_fires_per_source_and_names_it() {
    for alert in alerts() {
        let name = alert["alert"].as_str().unwrap();
        // About a process, not a source: `up` has no source.
        if name == "OutboxRelayDown" {
            continue;
        }
        let summary = alert["annotations"]["summary"].as_str().unwrap();
        assert!(
            summary.contains("{{ $labels.source }}"),
            "{name}: the summary names the source: {summary}"
        );
    }
    // Each recording rule an alert reads keeps the source.
    let rules = yaml(RULES);
    for rule in rules["groups"][0]["rules"].as_sequence().unwrap() {
        let Some(record) = rule["record"].as_str() else {
            continue;
        };
        let expr = rule["expr"].as_str().unwrap();
        assert!(
            expr.contains("by (source") || expr.starts_with("outbox:"),
            "{record}: {expr}"
        );
        assert!(!expr.contains("outbox_relay_info"), "{record}: {expr}");
    }
}

#[test]
fn the_dashboard_has_its_variables_and_reads_only_documented_metrics() {
    let dashboard: serde_json::Value = serde_json::from_str(&read(DASHBOARD)).unwrap();
    let variables: Vec<&str> = dashboard["templating"]["list"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["name"].as_str().unwrap())
        .collect();
    assert_eq!(variables, ["datasource", "source", "instance"]);
    assert_eq!(dashboard["templating"]["list"][0]["type"], "datasource");
    let documented = read("docs/operations.md");
    let panels = dashboard["panels"].as_array().unwrap();
    let mut read_metrics = BTreeSet::new();
    for panel in panels {
        let title = panel["title"].as_str().unwrap();
        assert_eq!(panel["datasource"]["uid"], "${datasource}", "{title}");
        let targets = panel["targets"].as_array().unwrap();
        assert!(!targets.is_empty(), "{title}");
        for target in targets {
            assert_eq!(target["datasource"]["uid"], "${datasource}", "{title}");
            let expr = target["expr"].as_str().unwrap();
            assert!(expr.contains("instance=~\"$instance\""), "{title}: {expr}");
            // Every relay series but the relay's own identity is per source.
            if !expr.contains("outbox_relay_info") {
                assert!(expr.contains("source=~\"$source\""), "{title}: {expr}");
            }
            read_metrics.extend(metric_names(expr));
        }
    }
    for metric in &read_metrics {
        let base = metric.trim_end_matches("_bucket");
        assert!(
            documented.contains(&format!("`{base}")),
            "{metric} is not in docs/operations.md's metrics table"
        );
    }
    for wanted in [
        "outbox_events_published_total",
        "outbox_commit_to_ack_seconds_bucket",
        "outbox_events_pending",
        "outbox_oldest_pending_age_seconds",
        "outbox_retries_total",
        "outbox_events_dead_lettered_total",
        "outbox_partitions_owned",
        "outbox_publisher_up",
        "outbox_database_up",
    ] {
        assert!(read_metrics.contains(wanted), "no panel shows {wanted}");
    }
}

#[test]
fn metric_names_are_read_from_expressions() {
    let names = metric_names(
        "max(outbox:events_pending:max) + rate(outbox_retries_total{reason=\"retry\"}[5m]) * on (job) outbox_relay_info",
    );
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    assert_eq!(names, ["outbox_relay_info", "outbox_retries_total"]);
}
