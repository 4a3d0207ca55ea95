//! `--publisher stdout`: one JSON object per line on standard output.

use std::io::Write;

use async_trait::async_trait;
use outbox::{Event, Outcome, Publisher, Unavailable};

use crate::Envelope;

/// Writes each event as a JSON line to standard output and flushes it
/// before reporting it delivered.
#[derive(Debug, Default)]
pub struct StdoutPublisher;

impl StdoutPublisher {
    /// A stdout publisher whose lines follow `envelope`: the outbox's own
    /// JSON lines for `plain`, one structured-mode CloudEvent per line for
    /// either CloudEvents format (a line has no headers to bind to).
    pub fn with_envelope(envelope: Envelope) -> EnvelopeStdoutPublisher {
        EnvelopeStdoutPublisher { envelope }
    }
}

/// [`StdoutPublisher`] with a message format: see
/// [`StdoutPublisher::with_envelope`].
#[derive(Debug, Default)]
pub struct EnvelopeStdoutPublisher {
    envelope: Envelope,
}

fn write_stdout(bytes: &[u8], n: usize) -> Result<Vec<Outcome>, Unavailable> {
    let mut out = std::io::stdout().lock();
    match out.write_all(bytes).and_then(|()| out.flush()) {
        Ok(()) => Ok(vec![Outcome::Delivered; n]),
        Err(e) => Err(Unavailable::new(format!("writing to stdout: {e}"))),
    }
}

#[async_trait]
impl Publisher for StdoutPublisher {
    fn name(&self) -> &str {
        "stdout"
    }

    async fn publish(&self, batch: &[Event]) -> Result<Vec<Outcome>, Unavailable> {
        write_stdout(&super::json_lines(batch, &Envelope::plain()), batch.len())
    }
}

#[async_trait]
impl Publisher for EnvelopeStdoutPublisher {
    fn name(&self) -> &str {
        "stdout"
    }

    async fn publish(&self, batch: &[Event]) -> Result<Vec<Outcome>, Unavailable> {
        write_stdout(&super::json_lines(batch, &self.envelope), batch.len())
    }
}
