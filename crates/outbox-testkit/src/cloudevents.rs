//! The official CloudEvents SDK for Python reading a message: what the
//! CloudEvents tests of the publishers and of the program check against.

use std::io::Write;
use std::process::{Command, Stdio};

use serde_json::Value;

/// The reader: `tests/cloudevents/read.py` of `outbox-publishers` (its
/// usage is in its docstring).
pub const READER: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../outbox-publishers/tests/cloudevents/read.py"
);

/// Runs [`READER`] for `binding` on `input` (an object: `headers`, `body`,
/// `key`, `content_type`, optionally `expect`). `Ok` is what the SDK read,
/// `Err` why it (or the check of `expect`) refused.
///
/// # Panics
///
/// If `python3` or the SDK is missing, or the reader prints no JSON.
pub fn sdk_read(binding: &str, input: &Value) -> Result<Value, String> {
    let mut child = Command::new("python3")
        .arg(READER)
        .arg(binding)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3 (with `pip install 'cloudevents>=2.2,<3'`)");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.to_string().as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        !stderr.contains("No module named"),
        "the CloudEvents SDK is missing: pip install 'cloudevents>=2.2,<3'\n{stderr}"
    );
    if !out.status.success() {
        return Err(stderr);
    }
    Ok(serde_json::from_slice(&out.stdout).expect("the reader prints JSON"))
}
