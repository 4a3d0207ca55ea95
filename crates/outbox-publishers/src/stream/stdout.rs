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

/// Most bytes written on the runtime's own thread. A pipe that polls
/// writable has room for at least this much (POSIX's `PIPE_BUF`, 4096 on
/// Linux), so such a write cannot wait for the reader.
const WRITE_NOW_MAX: usize = 4096;

/// Writes `bytes` (the lines of `n` events). A small batch that standard
/// output can take at once is written here; anything else on a blocking
/// thread: a reader that stops reading fills the pipe, and the write then
/// waits in the kernel. On a runtime thread it would hold that thread, and
/// with it whatever else the runtime had to run there (signal handling, the
/// shutdown deadline); there only the relay's own wait for this batch
/// waits. Handing every batch to a thread cost about 50 µs of CPU per
/// batch in thread wake-ups, most of the relay's CPU at a few hundred
/// events a second (docs/performance.md).
async fn write_stdout(bytes: Vec<u8>, n: usize) -> Result<Vec<Outcome>, Unavailable> {
    let written = match write_now(&bytes) {
        Some(written) => written,
        None => tokio::task::spawn_blocking(move || {
            let mut out = std::io::stdout().lock();
            out.write_all(&bytes).and_then(|()| out.flush())
        })
        .await
        .unwrap_or_else(|e| Err(std::io::Error::other(e))),
    };
    match written {
        Ok(()) => Ok(vec![Outcome::Delivered; n]),
        Err(e) => Err(Unavailable::new(format!("writing to stdout: {e}"))),
    }
}

/// Writes `bytes` now if it is at most [`WRITE_NOW_MAX`] and standard output
/// polls writable; `None` leaves it to a blocking thread. (Another writer
/// of the same pipe could fill it between the poll and the write; the write
/// then waits for the reader, as any blocking write would.)
fn write_now(bytes: &[u8]) -> Option<std::io::Result<()>> {
    use rustix::event::{poll, PollFd, PollFlags, Timespec};
    if bytes.len() > WRITE_NOW_MAX {
        return None;
    }
    let out = std::io::stdout();
    let mut fds = [PollFd::new(&out, PollFlags::OUT)];
    let now = Timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    match poll(&mut fds, Some(&now)) {
        Ok(1) if fds[0].revents() == PollFlags::OUT => {}
        _ => return None,
    }
    let mut out = out.lock();
    Some(out.write_all(bytes).and_then(|()| out.flush()))
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
