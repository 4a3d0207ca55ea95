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

/// Writes `bytes` (the lines of `n` events) on a blocking thread: a
/// reader that stops reading fills the pipe, and the write then waits in
/// the kernel. On a runtime thread it would hold that thread, and with it
/// whatever else the runtime had to run there (signal handling, the
/// shutdown deadline); here only the relay's own wait for this batch waits.
async fn write_stdout(bytes: Vec<u8>, n: usize) -> Result<Vec<Outcome>, Unavailable> {
    let written = tokio::task::spawn_blocking(move || {
        let mut out = std::io::stdout().lock();
        out.write_all(&bytes).and_then(|()| out.flush())
    })
    .await;
    match written {
        Ok(Ok(())) => Ok(vec![Outcome::Delivered; n]),
        Ok(Err(e)) => Err(Unavailable::new(format!("writing to stdout: {e}"))),
        Err(e) => Err(Unavailable::new(format!("writing to stdout: {e}"))),
    }
}

#[async_trait]
impl Publisher for StdoutPublisher {
    fn name(&self) -> &str {
        "stdout"
    }

    async fn publish(&self, batch: &[Event]) -> Result<Vec<Outcome>, Unavailable> {
        write_stdout(super::json_lines(batch, &Envelope::plain()), batch.len()).await
    }
}

#[async_trait]
impl Publisher for EnvelopeStdoutPublisher {
    fn name(&self) -> &str {
        "stdout"
    }

    async fn publish(&self, batch: &[Event]) -> Result<Vec<Outcome>, Unavailable> {
        write_stdout(super::json_lines(batch, &self.envelope), batch.len()).await
    }
}
