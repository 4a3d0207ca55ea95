//! A toy broker for the example publisher to talk to, in the same process.
//!
//! It listens on 127.0.0.1 and speaks a line protocol: the client sends one
//! [`Message`] per line, as JSON, and the broker answers each with one line,
//! `ok` once the message is stored or `rejected: <why>` for a message it
//! will never take (over [`MAX_MESSAGE_BYTES`], or not a message). Stored
//! messages stay in memory for the life of the process, so they survive
//! [`LineBroker::stop`] and [`LineBroker::start_again`] as a real broker's
//! log on disk would; a stop closes the listener and every connection.

use std::collections::BTreeMap;
use std::io;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};

use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::{JoinHandle, JoinSet};

/// The largest message line the broker takes, in bytes.
pub const MAX_MESSAGE_BYTES: usize = 1024 * 1024;

/// One message: what the publisher sends and the broker keeps.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Message {
    /// Where it goes (a topic, in broker terms).
    pub destination: String,
    /// The partitioning key: the aggregate id.
    pub key: String,
    /// The message headers.
    pub headers: BTreeMap<String, String>,
    /// The body: the event's payload text, unchanged.
    pub payload: String,
}

/// The broker: a port that stays the same across restarts, the stored
/// messages, and the task accepting connections while it runs.
pub struct LineBroker {
    addr: SocketAddr,
    messages: Arc<Mutex<Vec<Message>>>,
    running: Mutex<Option<JoinHandle<()>>>,
}

impl LineBroker {
    /// Starts a broker on a free port of 127.0.0.1.
    pub async fn start() -> io::Result<LineBroker> {
        let listener = TcpListener::bind((std::net::Ipv4Addr::LOCALHOST, 0)).await?;
        let broker = LineBroker {
            addr: listener.local_addr()?,
            messages: Arc::default(),
            running: Mutex::new(None),
        };
        broker.run(listener);
        Ok(broker)
    }

    /// Where the broker listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// A copy of every message stored so far, in arrival order.
    pub fn messages(&self) -> Vec<Message> {
        lock(&self.messages).clone()
    }

    /// Takes the broker down: the listener closes, and so does every open
    /// connection. Stored messages are kept.
    pub async fn stop(&self) {
        let task = lock(&self.running).take();
        if let Some(task) = task {
            // Dropping the accept task drops its JoinSet, which ends every
            // connection task.
            task.abort();
            let _ = task.await;
        }
    }

    /// Brings the broker back on the same port.
    pub async fn start_again(&self) -> io::Result<()> {
        // tokio sets SO_REUSEADDR, so the port can be bound again at once.
        let listener = TcpListener::bind(self.addr).await?;
        self.run(listener);
        Ok(())
    }

    fn run(&self, listener: TcpListener) {
        let messages = self.messages.clone();
        let task = tokio::spawn(async move {
            let mut connections = JoinSet::new();
            loop {
                match listener.accept().await {
                    Ok((stream, _)) => {
                        connections.spawn(serve(stream, messages.clone()));
                    }
                    Err(e) => eprintln!("line broker: accept failed: {e}"),
                }
                // Reap finished connections as we go.
                while connections.try_join_next().is_some() {}
            }
        });
        *lock(&self.running) = Some(task);
    }
}

/// Answers one connection's messages, one reply line per message line.
async fn serve(stream: TcpStream, messages: Arc<Mutex<Vec<Message>>>) {
    let (read, mut write) = stream.into_split();
    let mut lines = BufReader::new(read).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        let reply = if line.len() > MAX_MESSAGE_BYTES {
            format!(
                "rejected: a message of {} bytes is over the broker's limit of {MAX_MESSAGE_BYTES}\n",
                line.len()
            )
        } else {
            match serde_json::from_str::<Message>(&line) {
                Ok(message) => {
                    lock(&messages).push(message);
                    "ok\n".to_owned()
                }
                Err(e) => format!("rejected: not a message ({e})\n"),
            }
        };
        if write.write_all(reply.as_bytes()).await.is_err() {
            break;
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}
