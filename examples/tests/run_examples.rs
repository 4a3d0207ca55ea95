//! Runs each example program as a child process, each run on a fresh
//! database (on a throwaway cluster, or on `DATABASE_URL`'s server), and
//! checks what it printed: the examples are documentation that CI runs.

use std::collections::{HashMap, HashSet};
use std::process::Stdio;
use std::time::Duration;

use outbox_testkit::postgres::test_db;
use serde_json::Value;
use tokio::io::AsyncWriteExt;
use tokio::process::Command;
use uuid::Uuid;

/// What a finished example printed.
struct Run {
    stdout: String,
    stderr: String,
}

/// Runs example `program` with `args` on a fresh database, feeding it
/// `stdin`; fails the test unless it exits 0 within `deadline`.
async fn run(program: &str, args: &[&str], stdin: Option<&str>, deadline: Duration) -> Run {
    let db = test_db().await;
    let mut child = Command::new(program)
        .args(args)
        .env("DATABASE_URL", &db.url)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap_or_else(|e| panic!("starting {program}: {e}"));
    if let Some(input) = stdin {
        let mut pipe = child.stdin.take().expect("piped stdin");
        pipe.write_all(input.as_bytes())
            .await
            .expect("writing stdin");
        drop(pipe);
    }
    let output = tokio::time::timeout(deadline, child.wait_with_output())
        .await
        .unwrap_or_else(|_| panic!("{program} did not finish within {deadline:?}"))
        .expect("waiting for the example");
    let run = Run {
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    };
    assert!(
        output.status.success(),
        "{program} {args:?} failed ({})\n--- stdout\n{}\n--- stderr\n{}",
        output.status,
        run.stdout,
        run.stderr
    );
    run
}

/// Runs example `program` as [`run`] does, without arguments or stdin,
/// within `deadline_secs` seconds.
async fn run_alone(program: &str, deadline_secs: u64) -> Run {
    run(program, &[], None, Duration::from_secs(deadline_secs)).await
}

/// The `order.created` JSON lines the relay printed, by event id.
fn published(stdout: &str) -> HashMap<Uuid, Value> {
    let mut events = HashMap::new();
    for line in stdout.lines() {
        let v: Value = serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("stdout holds only relay JSON lines ({e}): {line}"));
        assert_eq!(v["event_type"], "order.created", "{line}");
        let id = v["id"].as_str().and_then(|s| Uuid::parse_str(s).ok());
        let id = id.unwrap_or_else(|| panic!("a line without an event id: {line}"));
        assert!(
            events.insert(id, v).is_none(),
            "event {id} published twice in a clean run"
        );
    }
    events
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn order_service_publishes_each_order_and_the_consumer_applies_each_once() {
    let service = run_alone(env!("CARGO_BIN_EXE_order_service"), 120).await;
    // "placed order 1 with event <uuid>", from the service's own responses.
    let placed: HashMap<Uuid, i64> = service
        .stderr
        .lines()
        .filter_map(|l| l.split_once("placed order ").map(|(_, rest)| rest))
        .map(|rest| {
            let (order, event) = rest.split_once(" with event ").expect("order and event");
            (Uuid::parse_str(event).unwrap(), order.parse().unwrap())
        })
        .collect();
    assert_eq!(placed.len(), 3, "three orders placed: {}", service.stderr);
    let events = published(&service.stdout);
    assert_eq!(
        events.len(),
        3,
        "one line per order, nothing else: {}",
        service.stdout
    );
    for (id, order_id) in &placed {
        let line = events
            .get(id)
            .unwrap_or_else(|| panic!("the event of order {order_id} was not published"));
        assert_eq!(line["aggregate_type"], "order");
        assert_eq!(line["aggregate_id"], order_id.to_string());
        assert_eq!(line["payload"]["order_id"], *order_id);
    }
    assert!(
        service
            .stderr
            .contains("3 orders placed over HTTP (orders 1, 2, 3), their 3 order.created events published by the relay"),
        "{}",
        service.stderr
    );
    assert!(service.stderr.contains("shut down cleanly"));

    // The relay's output, with its first line delivered again, into the
    // inbox consumer (on a database of its own).
    let first = service.stdout.lines().next().expect("a first line");
    let redelivered = format!("{}{first}\n", service.stdout);
    let consumer = run(
        env!("CARGO_BIN_EXE_inbox_consumer"),
        &["--stdin"],
        Some(&redelivered),
        Duration::from_secs(120),
    )
    .await;
    assert!(
        consumer
            .stdout
            .contains("4 deliveries read, 3 applied, 1 skipped as duplicates"),
        "{}",
        consumer.stdout
    );
    assert!(consumer
        .stdout
        .contains("total of ada: 2 orders, 1550 cents"));
    assert!(consumer
        .stdout
        .contains("total of grace: 1 order, 4999 cents"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inbox_consumer_skips_the_redelivered_sample_event() {
    let consumer = run_alone(env!("CARGO_BIN_EXE_inbox_consumer"), 120).await;
    let out = &consumer.stdout;
    assert!(
        out.contains("4 deliveries read, 3 applied, 1 skipped as duplicates"),
        "{out}"
    );
    let ids = |prefix: &str| -> Vec<String> {
        out.lines()
            .filter_map(|l| l.strip_prefix(prefix))
            .map(|rest| rest.split_whitespace().next().unwrap().to_owned())
            .collect()
    };
    let (applied, skipped) = (ids("applied  "), ids("skipped  "));
    assert_eq!(applied.len(), 3, "{out}");
    assert_eq!(
        applied.iter().collect::<HashSet<_>>().len(),
        3,
        "three distinct events applied: {out}"
    );
    assert_eq!(
        skipped,
        vec![applied[1].clone()],
        "the skipped one is the second event, delivered again: {out}"
    );
    assert!(out.contains("total of ada: 2 orders, 1550 cents"), "{out}");
    assert!(out.contains("total of grace: 1 order, 4999 cents"), "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn custom_publisher_passes_the_conformance_suite() {
    let suite = run_alone(env!("CARGO_BIN_EXE_custom_publisher"), 600).await;
    let out = &suite.stdout;
    for case in [
        "delivers_a_batch",
        "maps_headers_key_and_destination",
        "calls_in_flight_at_once_each_settle_their_own_events",
        "keeps_aggregate_order",
        "drains_a_large_batch",
        "delivers_every_event_as_stored",
        "rejects_an_oversized_message",
        "outage_burns_no_attempts",
        "survives_a_broker_restart",
    ] {
        assert!(
            out.lines().any(|l| l == format!("passed          {case}")),
            "{case} not reported as passed:\n{out}"
        );
        // The suite's own report of the case, on stderr.
        assert!(
            suite
                .stderr
                .contains(&format!("conformance line-broker: {case} passed")),
            "{case}: {}",
            suite.stderr
        );
    }
    assert!(
        out.contains("custom_publisher: 9 conformance cases passed, 0 not applicable, 0 failed"),
        "{out}"
    );
}
