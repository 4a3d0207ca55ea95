//! `--publisher stdout`: one JSON object per line on standard output.

use std::io::Write;

use async_trait::async_trait;
use outbox::{Event, Outcome, Publisher, Unavailable};

/// Writes each event as a JSON line to standard output and flushes it
/// before reporting it delivered.
#[derive(Debug, Default)]
pub struct StdoutPublisher;

#[async_trait]
impl Publisher for StdoutPublisher {
    fn name(&self) -> &str {
        "stdout"
    }

    async fn publish(&self, batch: &[Event]) -> Result<Vec<Outcome>, Unavailable> {
        let bytes = super::json_lines(batch);
        let mut out = std::io::stdout().lock();
        match out.write_all(&bytes).and_then(|()| out.flush()) {
            Ok(()) => Ok(vec![Outcome::Delivered; batch.len()]),
            Err(e) => Err(Unavailable::new(format!("writing to stdout: {e}"))),
        }
    }
}
