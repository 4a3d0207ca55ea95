//! Long: each guarantee of the metrics is one test here, and the per-source
//! ones (isolation, forgetting, the shared event type bound, a valid
//! exposition) need two or three sources each.

use std::time::Duration;

use outbox::{BatchReport, Event, OutageKind, RelayObserver, Status};
use outbox_testkit::promtool::check_metrics as promtool_check;

use super::*;

fn event(event_type: &str, age_ms: i64) -> Event {
    Event {
        id: uuid::Uuid::new_v4(),
        seq: 1,
        aggregate_type: "order".into(),
        aggregate_id: "1".into(),
        event_type: event_type.into(),
        payload: "{}".into(),
        headers: Default::default(),
        topic: None,
        attempts: 0,
        created_at: chrono::Utc::now() - chrono::TimeDelta::milliseconds(age_ms),
        partition: 0,
    }
}

/// The value of `sample` (`name{labels}`, exactly as exposed).
fn value(text: &str, sample: &str) -> f64 {
    find(text, sample).unwrap_or_else(|| panic!("no sample {sample} in\n{text}"))
}

fn find(text: &str, sample: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(sample)?.strip_prefix(' ')?.parse().ok())
}

/// A batch in which events of `failing` types were retried.
fn failures(source: &SourceMetrics, failing: &[&str]) {
    let retried: Vec<_> = failing
        .iter()
        .map(|t| (event(t, 0), "x".to_owned()))
        .collect();
    source.on_batch(&BatchReport {
        claimed: retried.len(),
        delivered: &[],
        retried: &retried,
        dead_lettered: &[],
        outage: None,
        acked_at: chrono::Utc::now(),
        duration: Duration::ZERO,
    });
}

fn status(pending: i64) -> Status {
    Status {
        schema: "public".into(),
        pending,
        retrying: 2,
        dead_letters: 3,
        oldest_pending_age_seconds: Some(4.5),
        partitions: Vec::new(),
        mode: "table".into(),
        slot: None,
        oldest_claimable_age_seconds: 0.0,
        oldest_snapshot_age_seconds: 0.0,
        paused: Vec::new(),
    }
}

#[test]
fn batches_outages_and_ownership_are_counted() {
    let m = Metrics::new();
    let s = m.source("public");
    let delivered = vec![event("order.created", 200), event("order.created", 20)];
    let retried = vec![(event("order.paid", 0), "timeout".to_owned())];
    let dead = vec![(event("order.paid", 0), "too large".to_owned())];
    s.on_batch(&BatchReport {
        claimed: 4,
        delivered: &delivered,
        retried: &retried,
        dead_lettered: &dead,
        outage: None,
        acked_at: chrono::Utc::now(),
        duration: Duration::from_millis(3),
    });
    s.on_outage(OutageKind::Broker, "down");
    s.on_outage(OutageKind::Database, "down");
    s.on_outage(OutageKind::Database, "down");
    s.on_ownership(7, 32);
    let text = m.encode();
    let expected = [
        ("outbox_events_published_total{source=\"public\"}", 2.0),
        (
            "outbox_events_failed_total{source=\"public\",event_type=\"order.paid\"}",
            2.0,
        ),
        ("outbox_events_dead_lettered_total{source=\"public\"}", 1.0),
        (
            "outbox_retries_total{source=\"public\",reason=\"retry\"}",
            1.0,
        ),
        (
            "outbox_retries_total{source=\"public\",reason=\"unavailable\"}",
            1.0,
        ),
        (
            "outbox_retries_total{source=\"public\",reason=\"database\"}",
            2.0,
        ),
        (
            "outbox_batch_duration_seconds_count{source=\"public\"}",
            1.0,
        ),
        ("outbox_commit_to_ack_seconds_count{source=\"public\"}", 2.0),
        (
            "outbox_commit_to_ack_seconds_bucket{le=\"0.1\",source=\"public\"}",
            1.0,
        ),
        (
            "outbox_commit_to_ack_seconds_bucket{le=\"0.25\",source=\"public\"}",
            2.0,
        ),
        ("outbox_partitions_owned{source=\"public\"}", 7.0),
        ("outbox_partitions{source=\"public\"}", 32.0),
    ];
    for (sample, want) in expected {
        assert_eq!(value(&text, sample), want, "{sample}");
    }
    assert_eq!(m.partitions_of("public"), Some((7, 32)));
    assert_eq!(m.partitions_of("elsewhere"), None);
}

#[test]
fn every_series_but_the_relay_info_carries_the_source_label() {
    let m = Metrics::new();
    let s = m.source("orders");
    failures(&s, &["order.paid"]);
    m.set_relay_info(RelayInfo {
        version: "1.2.3".into(),
        instance_id: "relay-a".into(),
        schema: "app".into(),
        publisher: "webhook".into(),
    });
    let text = m.encode();
    let samples: Vec<&str> = text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.starts_with("outbox_relay_info"))
        .collect();
    assert!(samples.len() > 30, "{text}");
    for sample in samples {
        assert!(sample.contains("source=\"orders\""), "{sample}");
    }
}

#[test]
fn two_sources_counts_never_mix() {
    let m = Metrics::new();
    let orders = m.source("orders");
    let tenant = m.source("tenants/tenant_7");
    let delivered = vec![event("order.created", 10); 3];
    orders.on_batch(&BatchReport {
        claimed: 3,
        delivered: &delivered,
        retried: &[],
        dead_lettered: &[],
        outage: None,
        acked_at: chrono::Utc::now(),
        duration: Duration::ZERO,
    });
    failures(&tenant, &["order.created", "invoice.sent"]);
    tenant.on_outage(OutageKind::Broker, "refused");
    orders.on_ownership(32, 32);
    tenant.on_ownership(5, 32);
    orders.set_status(&status(11));
    tenant.set_status(&status(0));
    orders.set_database_up(true);
    let text = m.encode();
    let of = |source: &str, name: &str| value(&text, &format!("{name}{{source=\"{source}\"}}"));
    assert_eq!(of("orders", "outbox_events_published_total"), 3.0);
    assert_eq!(of("tenants/tenant_7", "outbox_events_published_total"), 0.0);
    assert_eq!(of("orders", "outbox_commit_to_ack_seconds_count"), 3.0);
    assert_eq!(
        of("tenants/tenant_7", "outbox_commit_to_ack_seconds_count"),
        0.0
    );
    assert_eq!(of("orders", "outbox_batches_total"), 1.0);
    assert_eq!(of("tenants/tenant_7", "outbox_batches_total"), 1.0);
    assert_eq!(
        value(
            &text,
            "outbox_retries_total{source=\"tenants/tenant_7\",reason=\"retry\"}"
        ),
        2.0
    );
    assert_eq!(
        value(
            &text,
            "outbox_retries_total{source=\"orders\",reason=\"retry\"}"
        ),
        0.0
    );
    assert_eq!(
        value(
            &text,
            "outbox_events_failed_total{source=\"tenants/tenant_7\",event_type=\"order.created\"}"
        ),
        1.0
    );
    assert_eq!(
        find(
            &text,
            "outbox_events_failed_total{source=\"orders\",event_type=\"order.created\"}"
        ),
        None
    );
    assert_eq!(of("orders", "outbox_publisher_up"), 1.0);
    assert_eq!(of("tenants/tenant_7", "outbox_publisher_up"), 0.0);
    assert_eq!(of("orders", "outbox_database_up"), 1.0);
    assert_eq!(of("tenants/tenant_7", "outbox_database_up"), 0.0);
    assert_eq!(of("orders", "outbox_events_pending"), 11.0);
    assert_eq!(of("tenants/tenant_7", "outbox_events_pending"), 0.0);
    assert_eq!(m.partitions_of("orders"), Some((32, 32)));
    assert_eq!(m.partitions_of("tenants/tenant_7"), Some((5, 32)));
}

#[test]
fn naming_a_source_twice_gives_handles_to_the_same_series() {
    let m = Metrics::new();
    let first = m.source("orders");
    let again = m.source("orders");
    let clone = first.clone();
    first.on_ownership(3, 32);
    again.on_ownership(4, 32);
    assert_eq!(clone.partitions(), (4, 32));
    assert_eq!(clone.name(), "orders");
    failures(&first, &["a"]);
    failures(&again, &["a"]);
    let text = m.encode();
    assert_eq!(
        value(
            &text,
            "outbox_events_failed_total{source=\"orders\",event_type=\"a\"}"
        ),
        2.0
    );
    assert_eq!(
        text.lines()
            .filter(|l| l.starts_with("outbox_batches_total"))
            .count(),
        1
    );
}

#[test]
fn forgetting_a_source_removes_its_series_and_only_its_series() {
    let m = Metrics::new();
    let kept = m.source("orders");
    let dropped = m.source("tenants/tenant_9");
    for s in [&kept, &dropped] {
        failures(s, &["order.paid"]);
        s.on_outage(OutageKind::Database, "down");
        s.on_ownership(2, 32);
        s.set_status(&status(4));
    }
    let before = m.encode();
    m.forget_source("tenants/tenant_9");
    let after = m.encode();
    assert!(!after.contains("tenant_9"), "{after}");
    // Every line of the kept source is still there, unchanged.
    let of_kept = |text: &str| -> Vec<String> {
        text.lines()
            .filter(|l| l.contains("source=\"orders\""))
            .map(str::to_owned)
            .collect()
    };
    assert_eq!(of_kept(&before), of_kept(&after));
    assert!(of_kept(&after).len() > 30);
    assert_eq!(m.partitions_of("tenants/tenant_9"), None);
    // A handle still held by a relay winding down brings nothing back.
    failures(&dropped, &["order.paid", "order.new"]);
    dropped.on_ownership(1, 32);
    assert!(!m.encode().contains("tenant_9"));
    // Named again (the schema came back): from zero.
    let again = m.source("tenants/tenant_9");
    let text = m.encode();
    assert_eq!(
        value(
            &text,
            "outbox_events_published_total{source=\"tenants/tenant_9\"}"
        ),
        0.0
    );
    assert_eq!(again.partitions(), (0, 0));
    assert!(!text.contains("source=\"tenants/tenant_9\",event_type"));
}

#[test]
fn the_event_type_bound_holds_across_sources() {
    let m = Metrics::new();
    let sources = [m.source("a"), m.source("b"), m.source("c")];
    // 40 types each, no two sources alike: 120 distinct types.
    for (n, source) in sources.iter().enumerate() {
        for i in 0..40 {
            failures(source, &[&format!("type.{n}.{i}")]);
        }
    }
    let text = m.encode();
    let labels: HashSet<&str> = text
        .lines()
        .filter(|l| l.starts_with("outbox_events_failed_total{"))
        .filter_map(|l| l.split("event_type=\"").nth(1)?.split('"').next())
        .collect();
    assert_eq!(labels.len(), MAX_EVENT_TYPES + 1, "{labels:?}");
    assert!(labels.contains("other"));
    // The last source met the bound after 20 types; its last 20 are other.
    assert_eq!(
        value(
            &text,
            "outbox_events_failed_total{source=\"c\",event_type=\"other\"}"
        ),
        20.0
    );
    // A type known from one source keeps its own label in another.
    failures(&sources[2], &["type.0.0"]);
    assert_eq!(
        value(
            &m.encode(),
            "outbox_events_failed_total{source=\"c\",event_type=\"type.0.0\"}"
        ),
        1.0
    );
}

#[test]
fn the_exposition_of_two_sources_passes_promtool_check_metrics() {
    let m = Metrics::new();
    m.set_relay_info(RelayInfo {
        version: "1.2.3".into(),
        instance_id: "relay-a".into(),
        schema: "public".into(),
        publisher: "webhook".into(),
    });
    for name in ["orders", "tenants/tenant_7"] {
        let s = m.source(name);
        let delivered = vec![event("order.created", 30)];
        let dead = vec![(event("order.poison", 0), "rejected".to_owned())];
        s.on_batch(&BatchReport {
            claimed: 2,
            delivered: &delivered,
            retried: &[],
            dead_lettered: &dead,
            outage: None,
            acked_at: chrono::Utc::now(),
            duration: Duration::from_millis(4),
        });
        failures(&s, &["order.paid"]);
        s.on_ownership(16, 32);
        s.set_status(&status(1));
    }
    let text = m.encode();
    let helps = text
        .lines()
        .filter(|l| l.starts_with("# HELP outbox_events_published "))
        .count();
    assert_eq!(helps, 1, "one family, two sources:\n{text}");
    if let Some(verdict) = promtool_check(&text) {
        verdict.unwrap_or_else(|said| panic!("promtool: {said}\n{text}"));
    }
    // The check itself rejects a family exposed twice.
    let twice = text.replacen(
        "# EOF\n",
        "# HELP outbox_batches Batches.\n# TYPE outbox_batches counter\n# EOF\n",
        1,
    );
    if let Some(verdict) = promtool_check(&twice) {
        assert!(verdict.is_err(), "promtool let a second HELP through");
    }
}

#[test]
fn database_gauges_come_from_the_status() {
    let m = Metrics::new();
    let s = m.source("public");
    s.set_status(&status(12));
    let text = m.encode();
    assert_eq!(
        value(&text, "outbox_events_pending{source=\"public\"}"),
        12.0
    );
    assert_eq!(value(&text, "outbox_dead_letters{source=\"public\"}"), 3.0);
    assert_eq!(
        value(
            &text,
            "outbox_oldest_pending_age_seconds{source=\"public\"}"
        ),
        4.5
    );
    assert_eq!(
        value(&text, "outbox_database_up{source=\"public\"}"),
        0.0,
        "not checked yet"
    );
    s.set_database_up(true);
    assert_eq!(
        value(&m.encode(), "outbox_database_up{source=\"public\"}"),
        1.0
    );
    s.set_database_up(false);
    let text = m.encode();
    assert_eq!(value(&text, "outbox_database_up{source=\"public\"}"), 0.0);
    assert_eq!(
        value(&text, "outbox_events_pending{source=\"public\"}"),
        12.0,
        "kept"
    );
}

#[test]
fn the_publisher_is_down_from_a_broker_outage_until_a_batch_gets_through() {
    let m = Metrics::new();
    let s = m.source("public");
    let up = || value(&m.encode(), "outbox_publisher_up{source=\"public\"}");
    assert_eq!(up(), 1.0, "no outage seen");
    s.on_outage(OutageKind::Database, "down");
    assert_eq!(up(), 1.0, "not the broker");
    s.on_outage(OutageKind::Broker, "refused");
    assert_eq!(up(), 0.0);
    let delivered = vec![event("order.created", 0)];
    let batch = |outage| BatchReport {
        claimed: 1,
        delivered: &delivered,
        retried: &[],
        dead_lettered: &[],
        outage,
        acked_at: chrono::Utc::now(),
        duration: Duration::ZERO,
    };
    s.on_batch(&batch(Some("refused")));
    assert_eq!(up(), 0.0, "cut short");
    s.on_batch(&batch(None));
    assert_eq!(up(), 1.0);
}

#[test]
fn the_relay_info_names_this_relay() {
    let m = Metrics::new();
    assert!(
        !m.encode().contains("outbox_relay_info{"),
        "none before start"
    );
    m.set_relay_info(RelayInfo {
        version: "1.2.3".into(),
        instance_id: "relay-a".into(),
        schema: "app".into(),
        publisher: "webhook".into(),
    });
    let sample = "outbox_relay_info{version=\"1.2.3\",instance_id=\"relay-a\",schema=\"app\",publisher=\"webhook\"}";
    assert_eq!(value(&m.encode(), sample), 1.0);
}

#[test]
fn the_claimable_and_xmin_ages_come_from_the_database_read() {
    let m = Metrics::new();
    m.source("public").set_database_gauges(&DbGauges {
        status: Status {
            schema: "public".into(),
            pending: 5,
            retrying: 1,
            dead_letters: 0,
            oldest_pending_age_seconds: Some(90.0),
            partitions: Vec::new(),
            mode: "wal".into(),
            oldest_claimable_age_seconds: 12.5,
            oldest_snapshot_age_seconds: 700.0,
            paused: vec![None, Some("order".into())],
            slot: Some(outbox::SlotStatus {
                name: "outbox_public".into(),
                exists: true,
                active: true,
                lag_bytes: Some(4096),
                retained_bytes: Some(8192),
                lag_seconds: Some(0.5),
                switching_to_table: false,
                invalidated: false,
                switch_waits_for_transactions: false,
            }),
        },
        oldest_claimable_age_seconds: 12.5,
        oldest_xmin_age_seconds: 700.0,
        paused: 2,
    });
    let text = m.encode();
    let of = |name: &str| value(&text, &format!("{name}{{source=\"public\"}}"));
    assert_eq!(of("outbox_events_pending"), 5.0);
    assert_eq!(of("outbox_oldest_pending_age_seconds"), 90.0);
    assert_eq!(of("outbox_paused"), 2.0);
    assert_eq!(of("outbox_oldest_claimable_age_seconds"), 12.5);
    assert_eq!(of("outbox_oldest_xmin_age_seconds"), 700.0);
    assert_eq!(of("outbox_slot_lag_bytes"), 4096.0);
    assert_eq!(of("outbox_slot_retained_bytes"), 8192.0);
    assert_eq!(of("outbox_slot_active"), 1.0);
}

#[test]
fn refused_messages_are_counted_by_rule_and_forgotten_with_their_source() {
    let m = Metrics::new();
    let s = m.source("public");
    let sample =
        |rule: &str| format!("outbox_messages_refused_total{{source=\"public\",rule=\"{rule}\"}}");
    assert_eq!(
        value(&m.encode(), &sample("payload")),
        0.0,
        "from the start"
    );
    s.on_refused_message("payload");
    s.on_refused_message("payload");
    s.on_refused_message("duplicate_id");
    s.on_refused_message("a rule not yet known");
    let text = m.encode();
    assert_eq!(value(&text, &sample("payload")), 2.0);
    assert_eq!(value(&text, &sample("duplicate_id")), 1.0);
    assert_eq!(value(&text, &sample("other")), 1.0);
    assert_eq!(value(&text, &sample("length")), 0.0);
    m.forget_source("public");
    assert_eq!(find(&m.encode(), &sample("payload")), None);
}
