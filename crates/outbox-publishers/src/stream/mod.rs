//! The dependency-free publishers: JSON lines to stdout or to a file, and
//! a null publisher for benchmarks.

mod file;
mod null;
mod stdout;

pub use file::FilePublisher;
pub use null::NullPublisher;
pub use stdout::{EnvelopeStdoutPublisher, StdoutPublisher};

use outbox::Event;

use crate::Envelope;

/// Renders a batch as JSON lines, one object per event, each ending in
/// `\n`: the outbox's own lines for a plain `envelope`, structured-mode
/// CloudEvents for either CloudEvents format.
pub(crate) fn json_lines(batch: &[Event], envelope: &Envelope) -> Vec<u8> {
    let mut out = Vec::with_capacity(batch.len() * 256);
    for event in batch {
        if envelope.is_plain() {
            event.write_json_line(&mut out);
        } else {
            envelope.write_structured(event, &mut out);
        }
        out.push(b'\n');
    }
    out
}
