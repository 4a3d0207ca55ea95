//! Every `outbox bench` scenario runs end to end at a small size. Speed is
//! not asserted here (shared machines are noisy); the figures must only be
//! present and sane.

mod common;

use outbox_testkit::postgres::test_db;

fn last_json(out: &std::process::Output) -> serde_json::Value {
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "bench failed: {}{}",
        stdout,
        String::from_utf8_lossy(&out.stderr)
    );
    let line = stdout.lines().last().expect("a JSON line");
    serde_json::from_str(line).unwrap_or_else(|e| panic!("{line:?}: {e}"))
}

#[tokio::test]
async fn bench_drain_reports_both_rates_and_memory() {
    let db = test_db().await;
    let out = common::run(
        &[
            "bench",
            "drain",
            "--events",
            "3000",
            "--aggregates",
            "100",
            "--json",
        ],
        Some(&db.url),
    );
    let v = last_json(&out);
    assert_eq!(v["events"], 3000);
    assert!(v["reference_events_per_sec"].as_f64().unwrap() > 0.0);
    assert!(v["relay_events_per_sec"].as_f64().unwrap() > 0.0);
    assert!(v["ratio"].as_f64().unwrap() > 0.0);
    assert!(v["relay_peak_rss_mib"].as_f64().unwrap() > 1.0);
}

#[tokio::test]
async fn bench_latency_reports_percentiles_in_order() {
    let db = test_db().await;
    let out = common::run(
        &[
            "bench",
            "latency",
            "--rate",
            "200",
            "--seconds",
            "2",
            "--json",
        ],
        Some(&db.url),
    );
    let v = last_json(&out);
    assert_eq!(v["events"], 400);
    let p = |k: &str| v[k].as_f64().unwrap();
    assert!(
        p("p50_ms") <= p("p99_ms") && p("p99_ms") <= p("p999_ms") && p("p999_ms") <= p("max_ms")
    );
    assert!(p("max_ms") > 0.0);
}

#[tokio::test]
async fn bench_produce_reports_three_variants_and_ratios() {
    let db = test_db().await;
    let out = common::run(
        &[
            "bench",
            "produce",
            "--producers",
            "2",
            "--seconds",
            "1",
            "--json",
        ],
        Some(&db.url),
    );
    let v = last_json(&out);
    for k in [
        "plain_tps",
        "enqueue_tps",
        "trigger_tps",
        "a_over_b",
        "c_over_b",
    ] {
        assert!(v[k].as_f64().unwrap() > 0.0, "{k} in {v}");
    }
}
