//! Drain across many schemas against one: the same number of events, in
//! `--schemas` schemas × `--events-per-schema` or all in one schema, each
//! drained by a fresh relay of the same settings; the rate is taken from
//! the first delivery to the last (the start-up is the same for both and
//! is left out).

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::{ensure, Result};
use sqlx::PgPool;

use super::super::drain::preload;
use super::super::relay_cpu::Cpu;
use super::child::{self, Configs, Entry};
use super::SourcesArgs;
use outbox::Schema;

/// How long one drain may take.
const DEADLINE: Duration = Duration::from_secs(3_600);

/// One drain: events per second from the first delivery to the last, and
/// the seconds from the relay's start to the last delivery.
pub struct Rate {
    pub events_per_sec: f64,
    pub secs: f64,
    pub from_start_secs: f64,
    /// The relay's CPU (process and database sessions) per event, from its
    /// start to the last delivery (start-up included, alike for both).
    pub relay_us_per_event: f64,
}

/// What the drain phase measured.
pub struct Drain {
    pub events: u64,
    pub many: Rate,
    pub one: Rate,
}

impl Drain {
    /// Many schemas' rate against one schema's.
    pub fn ratio(&self) -> f64 {
        self.many.events_per_sec / self.one.events_per_sec
    }
}

/// Runs a relay on `text` until `total` events were delivered.
async fn drain(
    pool: &PgPool,
    configs: &Configs,
    instance: &str,
    text: &str,
    total: u64,
) -> Result<Rate> {
    let started = Instant::now();
    let mut relay = configs.spawn(instance, text)?;
    let mut cpu = Cpu::default();
    let cpu_before = cpu.now(pool, &relay).await?;
    let lines = relay.lines().expect("timed output").clone();
    let mut last_print = Instant::now();
    while lines.distinct.load(Ordering::Relaxed) < total {
        relay.check_running()?;
        ensure!(
            started.elapsed() < DEADLINE,
            "the relay did not drain {total} events within an hour"
        );
        if last_print.elapsed() > Duration::from_secs(5) {
            eprintln!(
                "bench sources: {instance} {} / {total}",
                lines.distinct.load(Ordering::Relaxed)
            );
            last_print = Instant::now();
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let from_start_secs = started.elapsed().as_secs_f64();
    let cpu_after = cpu.now(pool, &relay).await?;
    let status = relay.stop().await?;
    if !status.success() {
        eprintln!("bench sources: the draining relay ended with {status}");
    }
    let seen = lines.first_seen.lock().expect("lock");
    let first = seen.values().min().copied().unwrap_or(started);
    let last = seen.values().max().copied().unwrap_or(started);
    let secs = (last - first).as_secs_f64().max(1e-6);
    Ok(Rate {
        events_per_sec: total as f64 / secs,
        secs,
        from_start_secs,
        relay_us_per_event: (cpu_after.0 - cpu_before.0 + cpu_after.1 - cpu_before.1)
            / total.max(1) as f64
            * 1e6,
    })
}

pub async fn run(
    url: &str,
    pool: &PgPool,
    configs: &Configs,
    tenants: &[String],
    pattern: &str,
    one: &Schema,
    args: &SourcesArgs,
) -> Result<Drain> {
    let per = args.events_per_schema;
    let total = per * tenants.len() as u64;
    let aggregates = args.aggregates_per_schema;
    let entries = |e: Entry| child::config_text(url, args.pool_size, &[e]);

    eprintln!(
        "bench sources: preloading {total} events into {}",
        one.name()
    );
    preload(pool, one, total, aggregates * tenants.len() as u64).await?;
    let one_rate = drain(
        pool,
        configs,
        "bench-sources-drain-one",
        &entries(Entry::schema("one", one.name()))?,
        total,
    )
    .await?;
    let left = child::pending(pool, &[one.name().to_owned()]).await?;
    ensure!(
        left == 0,
        "{left} events left in {} after its drain",
        one.name()
    );

    eprintln!(
        "bench sources: preloading {per} events into each of {} schemas",
        tenants.len()
    );
    for name in tenants {
        preload(pool, &Schema::new(name)?, per, aggregates).await?;
    }
    let many_rate = drain(
        pool,
        configs,
        "bench-sources-drain-many",
        &entries(Entry::pattern("tenants", pattern))?,
        total,
    )
    .await?;
    let left = child::pending(pool, tenants).await?;
    ensure!(
        left == 0,
        "{left} events left in the tenants after their drain"
    );
    Ok(Drain {
        events: total,
        many: many_rate,
        one: one_rate,
    })
}
