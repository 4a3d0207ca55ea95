//! Waiting on a condition with a deadline, instead of sleeping.

use std::future::Future;
use std::time::{Duration, Instant};

/// Polls `cond` every 10 ms until it is true or `deadline` passes; panics
/// with `what` on timeout.
pub async fn wait_until<F, Fut>(what: &str, deadline: Duration, cond: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    wait_until_or_explain(what, deadline, cond, || async { String::new() }).await;
}

/// [`wait_until`], whose panic on timeout also carries what `explain`
/// reads then (the state that kept `cond` false).
pub async fn wait_until_or_explain<F, Fut, E, EFut>(
    what: &str,
    deadline: Duration,
    mut cond: F,
    explain: E,
) where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
    E: FnOnce() -> EFut,
    EFut: Future<Output = String>,
{
    let end = Instant::now() + deadline;
    loop {
        if cond().await {
            return;
        }
        if Instant::now() > end {
            let why = explain().await;
            let why = if why.is_empty() {
                why
            } else {
                format!("; {why}")
            };
            panic!("timed out after {deadline:?} waiting for {what}{why}");
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
