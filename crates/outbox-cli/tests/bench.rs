//! Every `outbox bench` scenario runs end to end at a small size. Speed is
//! not asserted here (shared machines are noisy); the figures must only be
//! present and sane.

mod common;

#[tokio::test]
async fn bench_drain_reports_both_rates_and_memory() {
    let (_db, v, _) = common::bench_fresh("drain --events 3000 --aggregates 100").await;
    assert_eq!(v["events"], 3000);
    assert!(v["reference_events_per_sec"].as_f64().unwrap() > 0.0);
    assert!(v["relay_events_per_sec"].as_f64().unwrap() > 0.0);
    assert!(v["ratio"].as_f64().unwrap() > 0.0);
    assert!(v["relay_peak_rss_mib"].as_f64().unwrap() > 1.0);
}

/// `bench drain --destination` fills in the template for every event (the
/// relay still drains all of them), reports what building the destinations
/// alone took beside the plain replacing, and refuses a template with an
/// unknown placeholder by name.
#[tokio::test]
async fn bench_drain_renders_the_destination_template_asked() {
    let (_db, v, stdout) = common::bench_fresh(
        "drain --events 2000 --aggregates 50 --destination {aggregate_type}.{event_type}",
    )
    .await;
    assert!(
        stdout.contains("destination {aggregate_type}.{event_type}")
            && stdout.contains("by plain replacing"),
        "{stdout}"
    );
    assert_eq!(v["destination"], "{aggregate_type}.{event_type}");
    assert!(v["relay_events_per_sec"].as_f64().unwrap() > 0.0);
    assert!(v["build_only_secs"].as_f64().unwrap() > 0.0);
    assert!(v["replacing_only_secs"].as_f64().unwrap() > 0.0);

    let out = common::run(&["bench", "drain", "--destination", "{aggregate}"], None);
    let err = common::text(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("--destination") && err.contains("{aggregate}"),
        "{err}"
    );

    // A header the preloaded events lack would reject them all: refused
    // before anything starts, naming the fix.
    let out = common::run(
        &["bench", "drain", "--destination", "t.{header.tenant}"],
        None,
    );
    let err = common::text(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("tenant") && err.contains(":-DEFAULT"), "{err}");
}

#[tokio::test]
async fn bench_latency_reports_percentiles_in_order() {
    let (_db, v, _) = common::bench_fresh("latency --rate 200 --seconds 2").await;
    assert_eq!(v["events"], 400);
    assert_eq!(v["producer"], "library");
    let p = |k: &str| v[k].as_f64().unwrap();
    assert!(
        p("p50_ms") <= p("p99_ms") && p("p99_ms") <= p("p999_ms") && p("p999_ms") <= p("max_ms")
    );
    assert!(p("max_ms") > 0.0);
}

#[tokio::test]
async fn bench_latency_sql_times_every_line_of_a_child_relay() {
    let (db, v, stdout) = common::bench_fresh("latency --producer sql --rate 50 --seconds 2").await;
    assert_eq!(v["producer"], "sql", "{v}");
    assert_eq!(v["wakeup_trigger"], "idle", "{v}");
    assert_eq!(v["events"], 100, "{v}");
    assert_eq!(v["delivered"], 100, "every event arrived: {v}");
    assert!(v["duplicates"].as_u64().is_some(), "{v}");
    let p = |k: &str| v[k].as_f64().unwrap();
    assert!(
        p("p50_ms") <= p("p99_ms") && p("p99_ms") <= p("p999_ms") && p("p999_ms") <= p("max_ms"),
        "{v}"
    );
    assert!(p("max_ms").is_finite() && p("max_ms") > 0.0, "{v}");
    // The human summary names the setup.
    assert!(
        stdout.contains("outbox relay --publisher stdout"),
        "{stdout}"
    );
    // The child relay ended with the bench.
    assert_eq!(
        common::relays_on(&db.url),
        Vec::<u32>::new(),
        "a child relay outlived the bench"
    );
}

#[test]
fn bench_latency_refuses_an_unknown_wakeup_mode() {
    let out = common::run(
        &[
            "bench",
            "latency",
            "--producer",
            "sql",
            "--wakeup-trigger",
            "sometimes",
        ],
        None,
    );
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("idle, every-insert or off"), "{stderr}");
}

#[tokio::test]
async fn bench_produce_reports_every_variant_and_reference_at_each_producer_count() {
    let (_db, v, _) = common::bench_fresh("produce --producers 1,2 --seconds 1").await;
    assert_eq!(v["producers"], serde_json::json!([1, 2]), "{v}");
    let rows = v["by_producers"].as_array().expect("by_producers");
    assert_eq!(rows.len(), 2, "{v}");
    for (row, n) in rows.iter().zip([1, 2]) {
        assert_eq!(row["producers"], n, "{row}");
        for k in [
            "plain_tps",
            "enqueue_tps",
            "trigger_tps",
            "idle_relay_tps",
            "a_over_b",
            "c_over_b",
            "d_over_b",
            "orders_tps",
            "seed_tps",
            "message_tps",
            "d_over_o",
            "d_over_s",
            "d_over_m",
            "orders_wal_bytes_per_tx",
            "seed_wal_bytes_per_tx",
            "message_wal_bytes_per_tx",
            "idle_relay_wal_bytes_per_tx",
        ] {
            let x = row[k].as_f64().unwrap_or(f64::NAN);
            assert!(x.is_finite() && x > 0.0, "{k} in {row}");
        }

        assert!(
            row["idle_relay_backlog_max"].as_i64().unwrap() >= 0,
            "{row}"
        );
        assert!(
            row["plain_relay_tps"].is_null(),
            "(e) only when asked: {row}"
        );
    }
}

#[tokio::test]
async fn bench_produce_takes_one_producer_count_and_the_relay_reference() {
    let (_db, v, _) =
        common::bench_fresh("produce --producers 2 --seconds 1 --relay-reference").await;
    assert_eq!(v["producers"], serde_json::json!([2]), "{v}");
    let rows = v["by_producers"].as_array().expect("by_producers");
    assert_eq!(rows.len(), 1, "{v}");
    for k in ["a_over_b", "c_over_b", "d_over_b", "e_over_b", "d_over_e"] {
        let x = rows[0][k].as_f64().unwrap_or(f64::NAN);
        assert!(x.is_finite() && x > 0.0, "{k} in {v}");
    }
}

#[tokio::test]
async fn bench_held_snapshot_samples_both_phases_and_compares_them() {
    let (db, v, _) =
        common::bench_fresh("held-snapshot --rate 200 --before 10 --hold 10 --sample-every 2")
            .await;
    let samples = v["samples"].as_array().expect("samples");
    assert!(samples.iter().any(|s| s["held"] == false));
    assert!(samples.iter().any(|s| s["held"] == true));
    assert!(
        samples.last().unwrap()["produced"].as_u64().unwrap() >= 1_000,
        "{v}"
    );
    let ratio = v["ratio"].as_f64().expect("a ratio: the server is local");
    assert!(ratio.is_finite() && ratio > 0.0, "{v}");
    assert!(v["max_oldest_pending_ms_held"]
        .as_f64()
        .unwrap()
        .is_finite());
    assert!(
        common::relays_on(&db.url).is_empty(),
        "the child relay is gone"
    );
}

/// `bench console` fills the outbox it is asked for, times every page
/// (each answered, with the handler's time) and compares the relay with
/// and without a console refreshing; the child relays end with it.
#[tokio::test]
async fn bench_console_times_every_page_and_the_relay_with_a_console_open() {
    let (db, v, stdout) = common::bench_fresh(
        "console --processed 2000 --pending 300 --dead 200 --requests 2 --rate 50 --seconds 4 --pairs 1",
    )
    .await;
    assert_eq!(v["scenario"], "console", "{v}");
    let pages = v["pages"].as_array().unwrap();
    assert!(pages.len() >= 12, "{v}");
    for p in pages {
        let (p50, p99) = (
            p["server_p50_ms"].as_f64().unwrap(),
            p["server_p99_ms"].as_f64().unwrap(),
        );
        assert!(p50 > 0.0 && p50 <= p99, "{p}");
        // The handler's time is part of the client's.
        assert!(p99 <= p["client_p99_ms"].as_f64().unwrap(), "{p}");
    }
    assert!(stdout.contains("stuck aggregates"), "{stdout}");
    let relay = &v["relay"];
    assert_eq!(relay["without"][0]["delivered"], 200, "{v}");
    assert_eq!(relay["with"][0]["delivered"], 200, "{v}");
    assert!(relay["p99_ms_with"].as_f64().unwrap() > 0.0, "{v}");
    assert!(relay["refreshes"].as_u64().unwrap() >= 1, "{v}");
    assert!(relay["p99_ratio"].as_f64().unwrap() > 0.0, "{v}");
    assert_eq!(
        common::relays_on(&db.url),
        Vec::<u32>::new(),
        "a child relay outlived the bench"
    );
}
