//! `deploy/kubernetes/` (a kustomize base) rendered by the real tool,
//! `kubectl kustomize`, and checked against what the program accepts: the
//! container's arguments, environment and ConfigMap pass `outbox config
//! check`; probes ask for paths the relay serves on the port it listens on;
//! the grace period outlasts its shutdown timeout; selectors match; and the
//! PrometheusRule holds exactly the groups of
//! `deploy/monitoring/outbox.rules.yml`.
//!
//! `prometheusrule.yaml` is generated from the rules file: run this test
//! with `OUTBOX_REGENERATE=1` to rewrite it after changing the rules.

mod common;
mod deploy_support;

use std::process::Command;

use deploy_support::{read, repo, run_ok, tool, yaml};
use serde_yaml::Value;

const PROMETHEUS_RULE: &str = "deploy/kubernetes/prometheusrule.yaml";

/// The PrometheusRule the rules file makes.
fn prometheus_rule_from_the_rules_file() -> String {
    let rules = yaml("deploy/monitoring/outbox.rules.yml");
    let resource = serde_yaml::to_string(&serde_yaml::from_str::<Value>(&format!(
        "apiVersion: monitoring.coreos.com/v1\nkind: PrometheusRule\nmetadata:\n  name: outbox-relay\nspec:\n{}",
        serde_yaml::to_string(&rules)
            .unwrap()
            .lines()
            .map(|l| format!("  {l}\n"))
            .collect::<String>()
    ))
    .unwrap())
    .unwrap();
    format!(
        "# Generated from deploy/monitoring/outbox.rules.yml by\n\
         # `OUTBOX_REGENERATE=1 cargo test -p outbox-cli --test deploy_kubernetes`:\n\
         # do not edit by hand.\n{resource}"
    )
}

#[test]
fn the_prometheus_rule_is_the_rules_file() {
    let wanted = prometheus_rule_from_the_rules_file();
    if std::env::var_os("OUTBOX_REGENERATE").is_some() {
        std::fs::write(repo().join(PROMETHEUS_RULE), &wanted).unwrap();
    }
    assert_eq!(
        read(PROMETHEUS_RULE),
        wanted,
        "{PROMETHEUS_RULE} is stale: run OUTBOX_REGENERATE=1 cargo test -p outbox-cli --test deploy_kubernetes"
    );
    let rule: Value = serde_yaml::from_str(&wanted).unwrap();
    assert_eq!(
        rule["spec"]["groups"],
        yaml("deploy/monitoring/outbox.rules.yml")["groups"],
        "the same groups, rule for rule"
    );
}

/// `kubectl kustomize deploy/kubernetes`: every resource, or `None` (said)
/// without kubectl.
fn rendered() -> Option<Vec<Value>> {
    let kubectl = tool("kubectl", &[])?;
    let out = run_ok(
        Command::new(kubectl)
            .arg("kustomize")
            .arg(repo().join("deploy/kubernetes")),
    );
    let text = String::from_utf8(out.stdout).unwrap();
    Some(
        serde_yaml::Deserializer::from_str(&text)
            .map(|doc| Value::deserialize(doc).unwrap())
            .collect(),
    )
}

use serde::Deserialize;

fn of_kind<'a>(resources: &'a [Value], kind: &str) -> &'a Value {
    let found: Vec<_> = resources.iter().filter(|r| r["kind"] == kind).collect();
    assert_eq!(found.len(), 1, "one {kind}");
    found[0]
}

fn str_of(v: &Value) -> &str {
    v.as_str().unwrap_or_else(|| panic!("not a string: {v:?}"))
}

/// `labels` ⊆ `of`.
fn selects(selector: &Value, of: &Value) -> bool {
    let selector = selector.as_mapping().expect("matchLabels");
    !selector.is_empty() && selector.iter().all(|(k, v)| of.get(k) == Some(v))
}

#[test]
fn the_rendered_base_matches_what_the_relay_accepts() {
    let Some(resources) = rendered() else {
        return;
    };
    let deployment = of_kind(&resources, "Deployment");
    let service = of_kind(&resources, "Service");
    let pdb = of_kind(&resources, "PodDisruptionBudget");
    let monitor = of_kind(&resources, "ServiceMonitor");
    let config_map = of_kind(&resources, "ConfigMap");
    let rule = of_kind(&resources, "PrometheusRule");
    assert_eq!(
        rule["spec"]["groups"],
        yaml("deploy/monitoring/outbox.rules.yml")["groups"]
    );

    assert_eq!(deployment["spec"]["replicas"], 2);
    let pod = &deployment["spec"]["template"];
    let pod_labels = &pod["metadata"]["labels"];
    assert!(selects(
        &deployment["spec"]["selector"]["matchLabels"],
        pod_labels
    ));
    assert!(selects(&pdb["spec"]["selector"]["matchLabels"], pod_labels));
    assert_eq!(pdb["spec"]["minAvailable"], 1);
    assert!(selects(&service["spec"]["selector"], pod_labels));
    assert!(selects(
        &monitor["spec"]["selector"]["matchLabels"],
        &service["metadata"]["labels"]
    ));
    assert_eq!(
        str_of(&service["metadata"]["name"]),
        "outbox-relay",
        "the job label OutboxRelayDown expects"
    );

    let containers = pod["spec"]["containers"].as_sequence().unwrap();
    assert_eq!(containers.len(), 1);
    let c = &containers[0];

    // The arguments, with the ConfigMap where they name it and the
    // environment the pod gets, pass `outbox config check`.
    let mount = c["volumeMounts"]
        .as_sequence()
        .unwrap()
        .iter()
        .find(|m| m["name"] == "config")
        .expect("the config volume is mounted");
    let mount_path = str_of(&mount["mountPath"]);
    let volume = pod["spec"]["volumes"]
        .as_sequence()
        .unwrap()
        .iter()
        .find(|v| v["name"] == "config")
        .unwrap();
    assert_eq!(
        volume["configMap"]["name"], config_map["metadata"]["name"],
        "the generated ConfigMap (with its hash suffix)"
    );
    let dir = tempfile::tempdir().unwrap();
    for (file, text) in config_map["data"].as_mapping().unwrap() {
        std::fs::write(dir.path().join(str_of(file)), str_of(text)).unwrap();
    }
    let args: Vec<String> = c["args"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|a| {
            let a = str_of(a);
            match a.strip_prefix(mount_path) {
                Some(rest) => format!("{}{rest}", dir.path().display()),
                None => a.to_owned(),
            }
        })
        .collect();
    let relay = args
        .iter()
        .position(|a| a == "relay")
        .expect("runs the relay");
    let mut check = args.clone();
    check.splice(relay..=relay, ["config".to_owned(), "check".to_owned()]);
    let mut cmd = common::bin();
    cmd.env_remove("OUTBOX_CONFIG").args(&check);
    let env = c["env"].as_sequence().unwrap();
    let names: Vec<&str> = env.iter().map(|e| str_of(&e["name"])).collect();
    assert_eq!(names, ["DATABASE_URL", "OUTBOX_RELAY_INSTANCE_ID"]);
    let secret = &env[0]["valueFrom"]["secretKeyRef"];
    assert_eq!(
        (str_of(&secret["name"]), str_of(&secret["key"])),
        ("outbox-database", "url")
    );
    assert_eq!(
        env[1]["valueFrom"]["fieldRef"]["fieldPath"],
        "metadata.name"
    );
    cmd.env("DATABASE_URL", "postgres://outbox:s3cret@db:5432/app")
        .env("OUTBOX_RELAY_INSTANCE_ID", "outbox-relay-7d9f-abcde");
    let out = run_ok(&mut cmd);
    let shown = String::from_utf8_lossy(&out.stdout);
    let setting = |key: &str| -> String {
        shown
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{key} = ")))
            .and_then(|v| v.split_whitespace().next())
            .unwrap_or_else(|| panic!("no {key} in {shown}"))
            .trim_matches('"')
            .to_owned()
    };
    assert_eq!(setting("instance_id"), "outbox-relay-7d9f-abcde");

    // Probes: paths the relay serves (the HTTP module's list of paths), on
    // the port it listens on.
    let http_module = read("crates/outbox-cli/src/daemon/http/mod.rs");
    let served = http_module
        .lines()
        .find(|l| l.contains("matches!(path,"))
        .expect("the HTTP module's list of paths");
    let addr = setting("addr");
    let listen_port: i64 = addr.rsplit_once(':').unwrap().1.parse().unwrap();
    let ports = c["ports"].as_sequence().unwrap();
    let http = ports
        .iter()
        .find(|p| p["name"] == "http")
        .expect("a port named http");
    assert_eq!(http["containerPort"].as_i64(), Some(listen_port), "{addr}");
    assert!(
        addr.starts_with("0.0.0.0:"),
        "reachable from the kubelet: {addr}"
    );
    for (probe, path) in [("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")] {
        let get = &c[probe]["httpGet"];
        assert_eq!(str_of(&get["path"]), path, "{probe}");
        assert_eq!(str_of(&get["port"]), "http", "{probe}");
        assert!(
            served.contains(&format!("\"{path}\"")),
            "the relay serves {path}: {served}"
        );
    }
    assert_eq!(service["spec"]["ports"][0]["targetPort"], "http");
    assert_eq!(monitor["spec"]["endpoints"][0]["port"], "http");
    assert_eq!(monitor["spec"]["endpoints"][0]["path"], "/metrics");

    // The grace period outlasts the graceful stop (the relay exits by
    // itself 2 s after its shutdown timeout).
    let shutdown: i64 = setting("shutdown_timeout_secs").parse().unwrap();
    let grace = pod["spec"]["terminationGracePeriodSeconds"]
        .as_i64()
        .unwrap();
    assert!(
        grace > shutdown + 2,
        "grace {grace} s, shutdown {shutdown} s"
    );
}
