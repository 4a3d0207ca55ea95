//! The example's [`Publisher`]: sends each event to the line broker and
//! turns the broker's answers into the relay's outcomes.
//!
//! What the relay expects of a publisher (see `outbox::Publisher`):
//!
//! * one [`Outcome`] per event, in batch order, and
//!   [`Outcome::Delivered`] only once the broker confirmed the event;
//! * [`Outcome::Rejected`] for an event the broker will never take (the
//!   relay dead-letters it at once), [`Outcome::Retry`] for a failure that
//!   may pass (the relay counts an attempt and backs off);
//! * a transport failure is not the events' fault: `Err(Unavailable)` when
//!   nothing got through, [`Outcome::Unavailable`] for the rest of a batch
//!   that failed part-way. Neither counts an attempt.

use std::net::SocketAddr;
use std::time::Duration;

use async_trait::async_trait;
use outbox::{Event, Outcome, Publisher, Unavailable};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;
use tokio::sync::Mutex;

use crate::broker::Message;

/// How long connecting may take before the broker counts as down.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// How long the broker may take to answer one message (well within the
/// relay's `publish_timeout_ms` for a whole batch).
const REPLY_TIMEOUT: Duration = Duration::from_secs(5);

/// Publishes to a line broker at `addr`, to `template` with
/// `{aggregate_type}` and `{event_type}` filled in (or the event's topic
/// override), keyed by aggregate id. Keeps one connection and opens a new
/// one after a failure.
pub struct LinePublisher {
    addr: SocketAddr,
    template: String,
    connection: Mutex<Option<Connection>>,
}

struct Connection {
    reader: BufReader<OwnedReadHalf>,
    writer: OwnedWriteHalf,
}

impl LinePublisher {
    /// A publisher for the broker at `addr`; connects on first use.
    pub fn new(addr: SocketAddr, template: impl Into<String>) -> LinePublisher {
        LinePublisher {
            addr,
            template: template.into(),
            connection: Mutex::new(None),
        }
    }

    /// The event as the broker's message, one JSON line. The payload goes
    /// as a string, so it arrives byte for byte as PostgreSQL stored it.
    fn line(&self, event: &Event) -> String {
        let message = Message {
            destination: event.destination(&self.template),
            key: event.aggregate_id.clone(),
            headers: event.message_headers().into_iter().collect(),
            payload: event.payload.clone(),
        };
        let mut line = serde_json::to_string(&message).expect("strings always serialise");
        line.push('\n');
        line
    }
}

#[async_trait]
impl Publisher for LinePublisher {
    fn name(&self) -> &str {
        "line-broker"
    }

    async fn publish(&self, batch: &[Event]) -> Result<Vec<Outcome>, Unavailable> {
        // The relay never sends two events of one aggregate in a batch, so
        // they could go concurrently; one connection, one at a time, keeps
        // this example short.
        let mut connection = self.connection.lock().await;
        let mut outcomes = Vec::with_capacity(batch.len());
        for event in batch {
            if connection.is_none() {
                match connect(self.addr).await {
                    Ok(c) => *connection = Some(c),
                    Err(e) => return transport_failed(outcomes, batch.len(), e),
                }
            }
            let c = connection.as_mut().expect("connected above");
            match c.send(&self.line(event)).await {
                Ok(reply) => outcomes.push(outcome(&reply)),
                Err(e) => {
                    // The connection is in an unknown state: never reuse it.
                    *connection = None;
                    return transport_failed(outcomes, batch.len(), e);
                }
            }
        }
        Ok(outcomes)
    }

    async fn health(&self) -> Result<(), Unavailable> {
        connect(self.addr).await.map(drop).map_err(Unavailable::new)
    }

    async fn close(&self) {
        if let Some(mut c) = self.connection.lock().await.take() {
            let _ = c.writer.shutdown().await;
        }
    }
}

impl Connection {
    /// Sends one message line and reads the broker's answer.
    async fn send(&mut self, line: &str) -> Result<String, String> {
        let exchange = async {
            self.writer.write_all(line.as_bytes()).await?;
            let mut reply = String::new();
            if self.reader.read_line(&mut reply).await? == 0 {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    "the broker closed the connection",
                ));
            }
            Ok(reply)
        };
        match tokio::time::timeout(REPLY_TIMEOUT, exchange).await {
            Ok(Ok(reply)) => Ok(reply),
            Ok(Err(e)) => Err(format!("line broker: {e}")),
            Err(_) => Err(format!("line broker: no answer within {REPLY_TIMEOUT:?}")),
        }
    }
}

async fn connect(addr: SocketAddr) -> Result<Connection, String> {
    match tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(addr)).await {
        Ok(Ok(stream)) => {
            let (read, writer) = stream.into_split();
            Ok(Connection {
                reader: BufReader::new(read),
                writer,
            })
        }
        Ok(Err(e)) => Err(format!("line broker at {addr}: {e}")),
        Err(_) => Err(format!(
            "line broker at {addr}: no connection within {CONNECT_TIMEOUT:?}"
        )),
    }
}

/// The broker's answer to one message, as the relay's outcome.
fn outcome(reply: &str) -> Outcome {
    let reply = reply.trim_end();
    if reply == "ok" {
        Outcome::Delivered
    } else if let Some(why) = reply.strip_prefix("rejected: ") {
        Outcome::Rejected(why.to_owned())
    } else {
        Outcome::Retry(format!("unexpected answer from the line broker: {reply:?}"))
    }
}

/// The transport failed after `outcomes.len()` events of `n` were answered:
/// the whole call is unavailable if none was, else the rest of the batch is.
fn transport_failed(
    mut outcomes: Vec<Outcome>,
    n: usize,
    error: String,
) -> Result<Vec<Outcome>, Unavailable> {
    if outcomes.is_empty() {
        return Err(Unavailable::new(error));
    }
    outcomes.resize(n, Outcome::Unavailable(error));
    Ok(outcomes)
}
