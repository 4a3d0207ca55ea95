//! `deploy/monitoring/` against the real thing: Debian's `prometheus`,
//! started here on a free port (scrape and evaluation every second),
//! scrapes a real `outbox relay` publishing to a webhook and loads the
//! rules. Every recording rule, every alert's expression (without its
//! threshold) and every dashboard query returns series; the delivery lag
//! and publisher-down alerts fire when the webhook stops while events pile
//! up, and go back to inactive once it returns; the relay-down alert fires
//! when the relay is killed.
//!
//! The test loads a copy of the rules in which every `for:` is 2 s and the
//! lag threshold 3 s instead of 60 s (so it runs in seconds, not minutes);
//! the expressions are the shipped ones, and `deploy_monitoring.rs` tests
//! the shipped durations with promtool.

mod common;
mod deploy_support;

use std::collections::BTreeSet;
use std::process::Stdio;
use std::time::Duration;

use common::http10_get;
use deploy_support::{query_encode, read, tool};
use outbox_testkit::process::free_port;
use outbox_testkit::wait::wait_until_or_explain;
use outbox_testkit::webhook::Receiver;
use serde_json::Value;

const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

/// The shipped rules with test-sized durations and lag threshold.
fn rules_for_the_test() -> (String, Vec<String>, Vec<String>) {
    let shipped = read("deploy/monitoring/outbox.rules.yml");
    let mut text = String::new();
    for line in shipped.lines() {
        match line.trim_start().strip_prefix("for: ") {
            Some(_) => {
                let indent = &line[..line.len() - line.trim_start().len()];
                text.push_str(&format!("{indent}for: 2s\n"));
            }
            None => text.push_str(&format!("{line}\n")),
        }
    }
    let lag = "outbox:oldest_claimable_age_seconds:max > 60";
    assert!(text.contains(lag), "the lag alert's expression moved");
    let text = text.replace(lag, "outbox:oldest_claimable_age_seconds:max > 3");
    let rules: serde_yaml::Value = serde_yaml::from_str(&text).unwrap();
    let mut records = Vec::new();
    let mut alert_exprs = Vec::new();
    for group in rules["groups"].as_sequence().unwrap() {
        for rule in group["rules"].as_sequence().unwrap() {
            let expr = rule["expr"].as_str().unwrap().trim().to_owned();
            if let Some(name) = rule["record"].as_str() {
                records.push(name.to_owned());
            } else {
                // The expression without its threshold: what it compares.
                let (left, _) = expr
                    .rsplit_once(" > ")
                    .or_else(|| expr.rsplit_once(" == "))
                    .unwrap_or_else(|| panic!("no threshold in {expr}"));
                alert_exprs.push(left.to_owned());
            }
        }
    }
    (text, records, alert_exprs)
}

/// Every dashboard query, its variables filled in as Grafana would with
/// "All" selected.
fn dashboard_queries() -> Vec<(String, String)> {
    let dashboard: Value =
        serde_json::from_str(&read("deploy/monitoring/outbox-dashboard.json")).unwrap();
    let mut queries = Vec::new();
    for panel in dashboard["panels"].as_array().unwrap() {
        for target in panel["targets"].as_array().unwrap() {
            let expr = target["expr"]
                .as_str()
                .unwrap()
                .replace("$instance", ".*")
                .replace("$source", ".*")
                .replace("$__rate_interval", "1m");
            queries.push((panel["title"].as_str().unwrap().to_owned(), expr));
        }
    }
    queries
}

struct Prometheus {
    port: u16,
}

impl Prometheus {
    /// The `data` of a successful answer to `GET /api/v1/PATH`.
    async fn api(&self, path: &str) -> Option<Value> {
        let (status, body) = http10_get(self.port, &format!("/api/v1/{path}")).await?;
        let v: Value = serde_json::from_str(&body).ok()?;
        (status == 200 && v["status"] == "success").then(|| v["data"].clone())
    }

    /// How many series `expr` returns now (`None`: no answer).
    async fn series(&self, expr: &str) -> Option<usize> {
        let data = self
            .api(&format!("query?query={}", query_encode(expr)))
            .await?;
        Some(data["result"].as_array()?.len())
    }

    /// The alerts in `state` (`firing` or `pending`).
    async fn alerts(&self, state: &str) -> BTreeSet<String> {
        let Some(data) = self.api("alerts").await else {
            return BTreeSet::new();
        };
        data["alerts"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|a| a["state"] == state)
            .map(|a| a["labels"]["alertname"].as_str().unwrap_or("").to_owned())
            .collect()
    }

    /// The `source` label of each alert in `state`, by alert name.
    async fn alert_sources(&self, state: &str) -> BTreeSet<(String, String)> {
        let Some(data) = self.api("alerts").await else {
            return BTreeSet::new();
        };
        data["alerts"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|a| a["state"] == state)
            .map(|a| {
                let label = |l: &str| a["labels"][l].as_str().unwrap_or("").to_owned();
                (label("alertname"), label("source"))
            })
            .collect()
    }

    /// Every expression of `exprs` that returns no series now.
    async fn empty(&self, exprs: &[(String, String)]) -> Vec<String> {
        let mut empty = Vec::new();
        for (what, expr) in exprs {
            if self.series(expr).await.unwrap_or(0) == 0 {
                empty.push(format!("{what}: {expr}"));
            }
        }
        empty
    }
}

async fn insert(pool: &sqlx::PgPool, events: i64) {
    sqlx::query(
        "INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload)
         SELECT 'order', 'agg-' || (g % 20), 'order.created', jsonb_build_object('n', g)
         FROM generate_series(1, $1) g",
    )
    .bind(events)
    .execute(pool)
    .await
    .unwrap();
}

fn set(names: &[&str]) -> BTreeSet<String> {
    names.iter().map(|s| s.to_string()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_prometheus_evaluates_the_rules_and_dashboard_on_a_running_relay() {
    let Some(prometheus) = tool("prometheus", &[]) else {
        return;
    };
    let receiver = Receiver::start(SECRET).await;
    let (db, pool) = outbox_testkit::postgres::migrated_test_db().await;
    let relay_port = free_port();
    let mut relay = tokio::process::Command::from({
        let mut cmd = common::bin();
        cmd.env("DATABASE_URL", &db.url)
            .env("OUTBOX_PUBLISHER_HTTP_SECRET", SECRET)
            .env("OUTBOX_HTTP_REFRESH_MS", "200")
            .env("OUTBOX_RELAY_OUTAGE_BACKOFF_MAX_MS", "500")
            .args(["relay", "--publisher", &receiver.url("/hook")])
            .args(["--instance-id", "prom", "--poll-max-ms", "50"])
            .args(["--http-addr", &format!("127.0.0.1:{relay_port}")])
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        cmd
    })
    .kill_on_drop(true)
    .spawn()
    .expect("spawn outbox relay");

    let dir = tempfile::tempdir().unwrap();
    let (rules, records, alert_exprs) = rules_for_the_test();
    std::fs::write(dir.path().join("outbox.rules.yml"), rules).unwrap();
    let config = format!(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n\
         rule_files: [outbox.rules.yml]\n\
         scrape_configs:\n  - job_name: outbox-relay\n    static_configs:\n      - targets: ['127.0.0.1:{relay_port}']\n"
    );
    std::fs::write(dir.path().join("prometheus.yml"), config).unwrap();
    let port = free_port();
    let log = std::fs::File::create(dir.path().join("prometheus.log")).unwrap();
    let _server = tokio::process::Command::new(prometheus)
        .current_dir(dir.path())
        .arg("--config.file=prometheus.yml")
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.path().join("data").display()
        ))
        .arg(format!("--web.listen-address=127.0.0.1:{port}"))
        .stdout(Stdio::null())
        .stderr(log)
        .kill_on_drop(true)
        .spawn()
        .expect("spawn prometheus");
    let prom = Prometheus { port };
    let log_tail = || async {
        let log = std::fs::read_to_string(dir.path().join("prometheus.log")).unwrap_or_default();
        let tail: Vec<&str> = log.lines().rev().take(15).collect();
        format!(
            "prometheus log (last lines, newest first):\n{}",
            tail.join("\n")
        )
    };

    // Some traffic, so rates and latency quantiles have samples.
    insert(&pool, 400).await;
    wait_until_or_explain(
        "the relay to deliver the first events",
        Duration::from_secs(30),
        || async { receiver.deliveries().len() >= 400 },
        || async { format!("{} delivered", receiver.deliveries().len()) },
    )
    .await;

    let mut queries: Vec<(String, String)> = records
        .iter()
        .map(|r| ("recording rule".to_owned(), r.clone()))
        .collect();
    queries.extend(alert_exprs.iter().map(|e| ("alert".to_owned(), e.clone())));
    let panels = dashboard_queries();
    assert!(panels.len() >= 10, "{panels:?}");
    queries.extend(panels);
    wait_until_or_explain(
        "every recording rule, alert expression and dashboard query to return series",
        Duration::from_secs(40),
        || async { prom.empty(&queries).await.is_empty() },
        || async {
            format!(
                "empty: {:#?}\n{}",
                prom.empty(&queries).await,
                log_tail().await
            )
        },
    )
    .await;
    assert!(
        prom.alerts("firing").await.is_empty(),
        "a healthy relay pages no one"
    );

    // The broker goes away while events keep coming.
    receiver.stop();
    insert(&pool, 50).await;
    let outage = set(&["OutboxDeliveryLag", "OutboxPublisherUnavailable"]);
    wait_until_or_explain(
        "the lag and publisher alerts to fire",
        Duration::from_secs(45),
        || async { prom.alerts("firing").await == outage },
        || async {
            format!(
                "firing: {:?}\n{}",
                prom.alerts("firing").await,
                log_tail().await
            )
        },
    )
    .await;
    // Each names the relay's one source, named after its schema.
    assert_eq!(
        prom.alert_sources("firing").await,
        outage
            .iter()
            .map(|a| (a.clone(), "public".to_owned()))
            .collect()
    );

    // It comes back: the backlog drains and both alerts end.
    receiver.start_again().await;
    wait_until_or_explain(
        "every alert to end once the broker is back",
        Duration::from_secs(45),
        || async {
            prom.alerts("firing").await.is_empty() && prom.alerts("pending").await.is_empty()
        },
        || async { format!("firing: {:?}", prom.alerts("firing").await) },
    )
    .await;
    let delivered: BTreeSet<_> = receiver
        .deliveries()
        .iter()
        .map(|d| d.event_id().expect("an event id"))
        .collect();
    assert_eq!(delivered.len(), 450, "every event delivered");

    relay.kill().await.unwrap();
    wait_until_or_explain(
        "the relay-down alert to fire",
        Duration::from_secs(30),
        || async { prom.alerts("firing").await.contains("OutboxRelayDown") },
        || async { format!("firing: {:?}", prom.alerts("firing").await) },
    )
    .await;
}
