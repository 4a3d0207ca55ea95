//! The applicable parts of the publisher conformance suite for the
//! JSON-lines publishers. They have no broker to stop, no size limit and no
//! message key, so the cases about those do not apply.
//!
//! * file: read back by reading the file;
//! * stdout: each publish call runs [`StdoutPublisher`] in a child process
//!   (this test binary, running the ignored helper `stdout_child`), and the
//!   child's standard output is what is read back.

#[macro_use]
mod common;

use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use outbox::{Event, Outcome, Publisher, Unavailable};
use outbox_publishers::{FilePublisher, StdoutPublisher};
use outbox_testkit::conformance::{Capabilities, Collector, Received, Scope};
use serde_json::{json, Value};

/// JSON lines carry no destination unless the event has a topic override.
const NO_DESTINATION: &str = "(none)";

/// One JSON line as the stream publishers write it. The payload is kept as
/// the raw text of the line, so the suite compares it byte for byte.
#[derive(serde::Deserialize)]
struct Line<'a> {
    id: String,
    aggregate_type: String,
    aggregate_id: String,
    event_type: String,
    #[serde(borrow)]
    payload: &'a serde_json::value::RawValue,
    headers: BTreeMap<String, String>,
    topic: Option<String>,
}

/// Turns JSON lines of `scope` into messages, the line's fields mapped to
/// the header names the brokers use.
fn read_lines(text: &str, scope: &Scope) -> Vec<Received> {
    let mut out = Collector::new();
    for line in text.lines().filter(|l| l.starts_with('{')) {
        let v: Line =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("not a JSON line ({e}): {line}"));
        if v.aggregate_type != scope.aggregate_type() {
            continue;
        }
        let mut headers = v.headers;
        headers.insert("outbox-event-id".to_owned(), v.id);
        headers.insert("outbox-event-type".to_owned(), v.event_type);
        headers.insert("outbox-aggregate-type".to_owned(), v.aggregate_type);
        headers.insert("outbox-aggregate-id".to_owned(), v.aggregate_id);
        out.push(Received {
            destination: v.topic.unwrap_or_else(|| NO_DESTINATION.to_owned()),
            key: None,
            headers,
            payload: v.payload.get().as_bytes().to_vec(),
        });
    }
    out.into_messages()
}

// ---- file ----

struct FileHarness {
    _dir: tempfile::TempDir,
    path: PathBuf,
}

impl FileHarness {
    fn new() -> FileHarness {
        let dir = tempfile::tempdir().expect("temporary directory");
        let path = dir.path().join("events.jsonl");
        FileHarness { _dir: dir, path }
    }
}

harness! {
    FileHarness => FilePublisher, "file", Capabilities::default();

    async fn publisher(&self) -> FilePublisher {
        FilePublisher::open(&self.path).expect("opening the file")
    }

    fn default_destination(&self, _scope: &Scope) -> String {
        NO_DESTINATION.into()
    }

    async fn consume(&self, scope: &Scope, _expected: usize, _deadline: Duration) -> Vec<Received> {
        // The publisher fsyncs before it reports delivery: the file is
        // complete once the events are delivered.
        let text = std::fs::read_to_string(&self.path).unwrap_or_default();
        read_lines(&text, scope)
    }
}

/// The suite for a JSON-lines publisher, in module `$module`, each test on
/// a new harness `$harness`; the cases about a size limit and a broker to
/// stop return early (its capabilities say it has neither).
macro_rules! json_lines_suite {
    ($module:ident, $harness:expr) => {
        mod $module {
            use super::*;

            outbox_testkit::conformance_suite! {
                shared: Some($harness),
                private: Some($harness),
                faithful_up_to: Some(50_000_000),
            }
        }
    };
}

json_lines_suite!(file, FileHarness::new());

// ---- stdout, through a child process ----

const CHILD_ENV: &str = "OUTBOX_STDOUT_CHILD_BATCH";

fn event_to_json(e: &Event) -> Value {
    json!({
        "id": e.id, "seq": e.seq, "aggregate_type": e.aggregate_type,
        "aggregate_id": e.aggregate_id, "event_type": e.event_type,
        "payload": e.payload, "headers": e.headers, "topic": e.topic,
        "attempts": e.attempts, "created_at": e.created_at, "partition": e.partition,
    })
}

fn event_from_json(v: Value) -> Event {
    Event {
        id: serde_json::from_value(v["id"].clone()).unwrap(),
        seq: v["seq"].as_i64().unwrap(),
        aggregate_type: v["aggregate_type"].as_str().unwrap().into(),
        aggregate_id: v["aggregate_id"].as_str().unwrap().into(),
        event_type: v["event_type"].as_str().unwrap().into(),
        payload: v["payload"].as_str().unwrap().into(),
        headers: serde_json::from_value(v["headers"].clone()).unwrap(),
        topic: v["topic"].as_str().map(str::to_owned),
        attempts: v["attempts"].as_i64().unwrap() as i32,
        created_at: serde_json::from_value(v["created_at"].clone()).unwrap(),
        partition: v["partition"].as_i64().unwrap() as i32,
    }
}

/// Runs [`StdoutPublisher`] in a child process per call and keeps what the
/// child wrote to its standard output.
#[derive(Clone, Default)]
struct ChildStdout {
    output: Arc<Mutex<String>>,
}

#[async_trait]
impl Publisher for ChildStdout {
    fn name(&self) -> &str {
        "stdout (child process)"
    }

    async fn publish(&self, batch: &[Event]) -> Result<Vec<Outcome>, Unavailable> {
        let events: Vec<Value> = batch.iter().map(event_to_json).collect();
        let mut file = tempfile::NamedTempFile::new().expect("batch file");
        file.write_all(Value::Array(events).to_string().as_bytes())
            .expect("writing the batch");
        let path = file.path().to_owned();
        let output = tokio::task::spawn_blocking(move || {
            Command::new(std::env::current_exe().expect("test binary"))
                .args([
                    "stdout_child",
                    "--exact",
                    "--ignored",
                    "--nocapture",
                    "--test-threads=1",
                ])
                .env(CHILD_ENV, &path)
                .stdin(Stdio::null())
                .output()
                .expect("running the child")
        })
        .await
        .expect("child task");
        drop(file);
        let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
        assert!(output.status.success(), "child failed: {stderr}");
        self.output.lock().unwrap().push_str(&stdout);
        if let Some(line) = stderr
            .lines()
            .find(|l| l.starts_with("child: unavailable: "))
        {
            return Err(Unavailable::new(
                line.trim_start_matches("child: unavailable: "),
            ));
        }
        let delivered = stderr
            .lines()
            .find_map(|l| l.strip_prefix("child: delivered "))
            .and_then(|n| n.trim().parse::<usize>().ok())
            .unwrap_or_else(|| panic!("child gave no outcome: {stderr}"));
        assert_eq!(
            delivered,
            batch.len(),
            "stdout publisher: one Delivered per event"
        );
        Ok(vec![Outcome::Delivered; batch.len()])
    }
}

/// Helper run as a child process by the stdout tests: publishes the batch
/// named by `OUTBOX_STDOUT_CHILD_BATCH` with [`StdoutPublisher`]. Does
/// nothing when run by hand.
#[tokio::test]
#[ignore = "helper run as a child process by the stdout_* tests"]
async fn stdout_child() {
    let Some(path) = std::env::var_os(CHILD_ENV) else {
        eprintln!("stdout_child is a helper of the stdout_* tests; nothing to do");
        return;
    };
    let text = std::fs::read_to_string(path).expect("reading the batch");
    let events: Vec<Event> = serde_json::from_str::<Vec<Value>>(&text)
        .expect("batch")
        .into_iter()
        .map(event_from_json)
        .collect();
    // libtest has written "test stdout_child ... " without a newline: end
    // that line, so the publisher's output starts on a line of its own.
    std::io::stdout().write_all(b"\n").expect("stdout");
    match StdoutPublisher.publish(&events).await {
        Ok(outcomes) => {
            let delivered = outcomes
                .iter()
                .filter(|o| **o == Outcome::Delivered)
                .count();
            eprintln!("child: delivered {delivered}");
        }
        Err(e) => eprintln!("child: unavailable: {}", e.message),
    }
}

#[derive(Default)]
struct StdoutHarness {
    publisher: ChildStdout,
}

harness! {
    StdoutHarness => ChildStdout, "stdout", Capabilities::default();

    async fn publisher(&self) -> ChildStdout {
        self.publisher.clone()
    }

    fn default_destination(&self, _scope: &Scope) -> String {
        NO_DESTINATION.into()
    }

    async fn consume(&self, scope: &Scope, _expected: usize, _deadline: Duration) -> Vec<Received> {
        let text = self.publisher.output.lock().unwrap().clone();
        read_lines(&text, scope)
    }
}

json_lines_suite!(stdout, StdoutHarness::default());
