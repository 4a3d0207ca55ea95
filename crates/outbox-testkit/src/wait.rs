//! Waiting on a condition with a deadline, instead of sleeping.

use std::future::Future;
use std::time::{Duration, Instant};

/// Polls `cond` every 10 ms until it is true or `deadline` passes; panics
/// with `what` on timeout.
pub async fn wait_until<F, Fut>(what: &str, deadline: Duration, mut cond: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let end = Instant::now() + deadline;
    loop {
        if cond().await {
            return;
        }
        if Instant::now() > end {
            panic!("timed out after {deadline:?} waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
