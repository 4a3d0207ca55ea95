//! `bench console`'s relay comparison: `bench latency --producer sql` on
//! the same server without and with consoles refreshing the overview.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{ensure, Result};
use serde_json::json;

use super::super::latency::{self, LatencyArgs, Producer};
use super::super::stats::median;
use super::super::Server;
use super::ConsoleArgs;
use crate::ctx::Ctx;

/// How often the overview page asks for fresh figures (console.js).
const REFRESH: Duration = Duration::from_secs(3);

/// The relay's black-box latency at `--rate` without and with consoles
/// refreshing the overview, `--pairs` of each in the order without, with,
/// with, without, … (so a drift of the machine weighs on both alike); the
/// median p99 of each and their ratio.
pub async fn relay_with_and_without(
    ctx: &Ctx,
    fsync: bool,
    server: &Server,
    client: &reqwest::Client,
    base: &str,
    args: &ConsoleArgs,
) -> Result<serde_json::Value> {
    // `bench latency` on this same server: its Server helper uses a
    // configured database URL as it is.
    let same_server = Ctx {
        database_url: Some(server.url.clone()),
        ..ctx.clone()
    };
    let latency_args = || LatencyArgs {
        rate: args.rate,
        seconds: args.seconds,
        connections: 32,
        producer: Producer::Sql,
        wakeup_trigger: None,
        idle_secs: 2,
        mode: None,
        latency_budget_ms: None,
    };
    let mut without = Vec::new();
    let mut with = Vec::new();
    let mut refreshes = 0;
    for run in 0..2 * args.pairs {
        // without, with, with, without, without, with, …
        let console_open = matches!(run % 4, 1 | 2);
        if !console_open {
            eprintln!("bench console: the relay at {} /s, no console", args.rate);
            without.push(latency::run(&same_server, fsync, latency_args()).await?);
            continue;
        }
        eprintln!(
            "bench console: the relay at {} /s, {} console(s) refreshing",
            args.rate, args.viewers
        );
        let viewers = Viewers::open(client, base, args.viewers);
        let measured = latency::run(&same_server, fsync, latency_args()).await;
        let (done, failed) = viewers.close();
        ensure!(failed == 0, "{failed} of the consoles' refreshes failed");
        refreshes += done;
        with.push(measured?);
    }
    let p99s = |runs: &[serde_json::Value]| -> Vec<f64> {
        runs.iter()
            .map(|v| v["p99_ms"].as_f64().unwrap_or(f64::NAN))
            .collect()
    };
    let (p99_without, p99_with) = (median(p99s(&without)), median(p99s(&with)));
    let ratio = p99_with / p99_without;
    println!(
        "console: relay p99 at {} /s, median of {} runs each: {p99_without:.2} ms without a console \
         {:?}, {p99_with:.2} ms with {} refreshing {:?} ({refreshes} refreshes): {ratio:.2}×",
        args.rate,
        args.pairs,
        p99s(&without),
        args.viewers,
        p99s(&with),
    );
    Ok(json!({
        "rate": args.rate,
        "seconds": args.seconds,
        "viewers": args.viewers,
        "refreshes": refreshes,
        "p99_ms_without": p99_without,
        "p99_ms_with": p99_with,
        "p99_ratio": ratio,
        "without": without,
        "with": with,
    }))
}

/// Consoles polling `/overview.json` at the page's interval, as open
/// overview pages do, each started at its own offset in the interval.
struct Viewers {
    stop: Arc<AtomicBool>,
    done: Arc<AtomicU64>,
    failed: Arc<AtomicU64>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Viewers {
    fn open(client: &reqwest::Client, base: &str, n: u32) -> Viewers {
        let stop = Arc::new(AtomicBool::new(false));
        let done = Arc::new(AtomicU64::new(0));
        let failed = Arc::new(AtomicU64::new(0));
        let tasks = (0..n)
            .map(|v| {
                let (client, url) = (client.clone(), format!("{base}/overview.json"));
                let (stop, done, failed) = (stop.clone(), done.clone(), failed.clone());
                let offset = REFRESH.mul_f64(f64::from(v) / f64::from(n));
                tokio::spawn(async move {
                    tokio::time::sleep(offset).await;
                    let mut tick = tokio::time::interval(REFRESH);
                    while !stop.load(Ordering::Relaxed) {
                        tick.tick().await;
                        let ok = match client.get(&url).send().await {
                            Ok(r) => r.status().is_success() && r.bytes().await.is_ok(),
                            Err(_) => false,
                        };
                        let counter = if ok { &done } else { &failed };
                        counter.fetch_add(1, Ordering::Relaxed);
                    }
                })
            })
            .collect();
        Viewers {
            stop,
            done,
            failed,
            tasks,
        }
    }

    /// Stops them: the refreshes done and failed.
    fn close(self) -> (u64, u64) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.tasks {
            t.abort();
        }
        (
            self.done.load(Ordering::Relaxed),
            self.failed.load(Ordering::Relaxed),
        )
    }
}
