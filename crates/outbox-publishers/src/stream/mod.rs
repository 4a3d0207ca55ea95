//! The dependency-free publishers: JSON lines to stdout or to a file, and
//! a null publisher for benchmarks.

mod file;
mod null;
mod stdout;

pub use file::FilePublisher;
pub use null::NullPublisher;
pub use stdout::StdoutPublisher;

use outbox::Event;

/// Renders a batch as JSON lines, one object per event, each ending in `\n`.
pub(crate) fn json_lines(batch: &[Event]) -> Vec<u8> {
    let mut out = Vec::with_capacity(batch.len() * 256);
    for event in batch {
        event.write_json_line(&mut out);
        out.push(b'\n');
    }
    out
}
