//! The wake-up listener: one connection LISTENing on every served schema's
//! channel and the schema changes' channel, reconnecting on loss.

use std::time::Duration;

use sqlx::postgres::PgListener;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::{Heard, State};
use crate::queries as q;

/// The wait before the listener connects again.
const RECONNECT_DELAY: Duration = Duration::from_millis(500);

impl State {
    /// The listener for every served schema's channel and the schema
    /// changes' channel, on its own task (replaced when the schemas change).
    pub(super) fn spawn_listener(&self, heard: mpsc::UnboundedSender<Heard>) -> JoinHandle<()> {
        let mut channels: Vec<String> = self
            .served
            .values()
            .map(|s| s.shared.schema.channel())
            .collect();
        channels.push(q::SCHEMAS_CHANGED_CHANNEL.to_owned());
        let pool = self.pool.clone();
        let key = self.db.key.clone();
        tokio::spawn(async move {
            loop {
                let mut listener = match PgListener::connect_with(&pool).await {
                    Ok(l) => l,
                    Err(e) => {
                        tracing::debug!(database = %key, error = %e, "wake-up listener cannot connect; the dormant check covers meanwhile");
                        tokio::time::sleep(RECONNECT_DELAY).await;
                        continue;
                    }
                };
                if let Err(e) = listener
                    .listen_all(channels.iter().map(String::as_str))
                    .await
                {
                    tracing::debug!(database = %key, error = %e, "LISTEN failed; the dormant check covers meanwhile");
                    tokio::time::sleep(RECONNECT_DELAY).await;
                    continue;
                }
                if heard.send(Heard::Connected).is_err() {
                    return;
                }
                loop {
                    match listener.recv().await {
                        Ok(n) => {
                            let sent = heard.send(Heard::Notification {
                                channel: n.channel().to_owned(),
                                payload: n.payload().to_owned(),
                            });
                            if sent.is_err() {
                                return;
                            }
                        }
                        Err(e) => {
                            tracing::debug!(database = %key, error = %e, "wake-up listener lost its connection");
                            tokio::time::sleep(RECONNECT_DELAY).await;
                            break;
                        }
                    }
                }
            }
        })
    }
}
