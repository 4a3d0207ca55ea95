//! The wake-up listener: `LISTEN` on the schema's channel; a notification
//! wakes the worker, a rebalance announcement starts a lease round. Without
//! it the relay still works, by polling.

use std::sync::Arc;
use std::time::Duration;

use sqlx::postgres::PgListener;
use sqlx::PgPool;

use crate::wakeup::Wakeup;

/// The wait before connecting again after the listener could not connect or
/// `LISTEN` failed.
const RECONNECT_DELAY: Duration = Duration::from_secs(1);
/// The wait before connecting again after the listener lost its connection.
const LOST_DELAY: Duration = Duration::from_millis(500);

/// Listens until the task is aborted.
pub(crate) async fn listen_loop(
    pool: PgPool,
    channel: String,
    wakeup: Arc<Wakeup>,
    rebalance: Arc<tokio::sync::Notify>,
) {
    loop {
        let mut listener = match PgListener::connect_with(&pool).await {
            Ok(l) => l,
            Err(e) => {
                tracing::debug!(error = %e, "wake-up listener cannot connect; polling meanwhile");
                tokio::time::sleep(RECONNECT_DELAY).await;
                continue;
            }
        };
        if let Err(e) = listener.listen(&channel).await {
            tracing::debug!(error = %e, "LISTEN failed; polling meanwhile");
            tokio::time::sleep(RECONNECT_DELAY).await;
            continue;
        }
        loop {
            match listener.recv().await {
                Ok(n) if n.payload() == crate::queries::REBALANCE_PAYLOAD => {
                    rebalance.notify_one();
                }
                Ok(n) if n.payload() == crate::queries::PAUSES_PAYLOAD => {
                    wakeup.pauses_changed();
                    // A lifted pause leaves rows to claim.
                    wakeup.wake_local();
                }
                Ok(_) => wakeup.wake_local(),
                Err(e) => {
                    tracing::debug!(error = %e, "wake-up listener lost its connection");
                    tokio::time::sleep(LOST_DELAY).await;
                    break;
                }
            }
        }
    }
}
