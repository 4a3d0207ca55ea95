//! Idle schemas: what a relay holds (connections), what it spends (CPU,
//! process and sessions, as a share of a core) while it has nothing to do,
//! and how fast a plain-SQL insert into a sleeping schema is delivered
//! (commit → its line read from the relay's output).
//!
//! Measured twice in one run: the relay of many sources over `--schemas`
//! tenants, every one dormant; and, as the reference, `outbox relay
//! --schema` over one schema, idle (its announcement standing) — what one
//! tenant cost before sources.

use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use outbox::Schema;
use rand::seq::SliceRandom;
use sqlx::PgPool;
use uuid::Uuid;

use super::super::child_relay::{ChildRelay, Output};
use super::super::relay_cpu::{core_share, Cpu};
use super::super::stats::{ms, quantile};
use super::child::{self, Configs, Entry};
use super::SourcesArgs;

/// How long a relay may take to find and announce every schema.
const SETTLE: Duration = Duration::from_secs(300);

/// How long the relay is left asleep before its idle CPU is read: its
/// start-up (every schema checked once, each session's first reads of
/// every schema's catalog entries) is not what idling costs.
const IDLE_GRACE: Duration = Duration::from_secs(5);
/// How long one wake-up may take before the run fails.
const WAKEUP_DEADLINE: Duration = Duration::from_secs(30);

/// What one idle measurement found.
pub struct Idle {
    /// Most relay sessions seen at once (idle window and wake-ups).
    pub connections: i64,
    /// The relay's CPU while idle, share of one core: process and
    /// sessions, then each apart.
    pub core_share: f64,
    pub process_share: f64,
    pub sessions_share: f64,
    /// Each wake-up's commit-to-delivery time, sorted.
    pub wakeups: Vec<Duration>,
    /// How long the relay took from its start until every schema slept.
    pub settle_secs: f64,
}

impl Idle {
    pub fn p(&self, q: f64) -> f64 {
        ms(quantile(&self.wakeups, q))
    }
}

/// What "asleep" means for the relay measured.
#[derive(Clone, Copy)]
enum Asleep {
    /// A source of the relay of many sources: dormant.
    Dormant,
    /// `outbox relay --schema`: it holds every partition and its idle
    /// announcement stands.
    Announced,
}

async fn wait_asleep(
    relay: &mut ChildRelay,
    pool: &PgPool,
    schemas: &[String],
    asleep: Asleep,
    within: Duration,
) -> Result<()> {
    match asleep {
        Asleep::Dormant => child::wait_dormant(relay, pool, schemas, within).await,
        Asleep::Announced => {
            for s in schemas {
                relay.wait_idle(pool, &Schema::new(s)?, within).await?;
            }
            Ok(())
        }
    }
}

/// The relay of many sources over `tenants` (found by `pattern`).
pub async fn many(
    url: &str,
    pool: &PgPool,
    configs: &Configs,
    tenants: &[String],
    pattern: &str,
    args: &SourcesArgs,
) -> Result<Idle> {
    let text = child::config_text(url, args.pool_size, &[Entry::pattern("tenants", pattern)])?;
    let started = Instant::now();
    let relay = configs.spawn("bench-sources-idle", &text)?;
    measure(relay, started, pool, tenants, Asleep::Dormant, args).await
}

/// The reference: `outbox relay --schema` over `schema` alone.
pub async fn one(url: &str, pool: &PgPool, schema: &Schema, args: &SourcesArgs) -> Result<Idle> {
    let started = Instant::now();
    let relay = ChildRelay::spawn(url, schema, "bench-sources-idle-one", Output::Timed)?;
    let schemas = [schema.name().to_owned()];
    measure(relay, started, pool, &schemas, Asleep::Announced, args).await
}

async fn measure(
    mut relay: ChildRelay,
    started: Instant,
    pool: &PgPool,
    schemas: &[String],
    asleep: Asleep,
    args: &SourcesArgs,
) -> Result<Idle> {
    wait_asleep(&mut relay, pool, schemas, asleep, SETTLE).await?;
    let settle_secs = started.elapsed().as_secs_f64();
    eprintln!(
        "bench sources: {} schema(s) asleep {settle_secs:.1} s after the relay started; idle for {} s after {} s more",
        schemas.len(),
        args.idle_secs,
        IDLE_GRACE.as_secs()
    );
    tokio::time::sleep(IDLE_GRACE).await;
    let mut connections = child::relay_sessions(pool).await?;

    // The idle window: the relay's CPU, its sessions looked at each second.
    let mut cpu = Cpu::default();
    let from = (cpu.now(pool, &relay).await?, Instant::now());
    let until = Instant::now() + Duration::from_secs(args.idle_secs);
    while Instant::now() < until {
        tokio::time::sleep(Duration::from_secs(1).min(until - Instant::now())).await;
        relay.check_running()?;
        connections = connections.max(child::relay_sessions(pool).await?);
    }
    let to = (cpu.now(pool, &relay).await?, Instant::now());
    let secs = (to.1 - from.1).as_secs_f64();
    let core_share = core_share(from.0, to.0, secs);
    let process_share = (to.0 .0 - from.0 .0) / secs;
    let sessions_share = (to.0 .1 - from.0 .1) / secs;

    // Wake-ups: each into another schema (where there are several),
    // asleep before it, in random order, on a connection opened
    // beforehand.
    let mut order: Vec<&String> = schemas.iter().collect();
    order.shuffle(&mut rand::rng());
    let mut producer = pool.acquire().await?;
    let lines = relay.lines().expect("timed output").clone();
    let mut wakeups = Vec::with_capacity(args.wakeups as usize);
    for i in 0..args.wakeups as usize {
        let schema = order[i % order.len()];
        wait_asleep(
            &mut relay,
            pool,
            std::slice::from_ref(schema),
            asleep,
            WAKEUP_DEADLINE,
        )
        .await?;
        let id: Uuid = sqlx::query_scalar(&format!(
            "INSERT INTO {schema}.outbox_events (aggregate_type, aggregate_id, event_type, payload)
             VALUES ('tenant', $1, 'tenant.touched', '{{}}') RETURNING id"
        ))
        .bind(format!("wakeup-{i}"))
        .fetch_one(&mut *producer)
        .await?;
        let committed = Instant::now();
        let seen = loop {
            if let Some(at) = lines.first_seen.lock().expect("lock").get(&id) {
                break *at;
            }
            if committed.elapsed() > WAKEUP_DEADLINE {
                bail!(
                    "an insert into {schema} was not delivered within {} s",
                    WAKEUP_DEADLINE.as_secs()
                );
            }
            relay.check_running()?;
            tokio::time::sleep(Duration::from_micros(200)).await;
        };
        // The relay can see a commit before the client hears of it.
        wakeups.push(seen.saturating_duration_since(committed));
        connections = connections.max(child::relay_sessions(pool).await?);
        tokio::time::sleep(Duration::from_millis(args.wakeup_gap_ms)).await;
    }
    wakeups.sort();
    drop(producer);
    let status = relay.stop().await?;
    if !status.success() {
        eprintln!("bench sources: the idle relay ended with {status}");
    }
    Ok(Idle {
        connections,
        core_share,
        process_share,
        sessions_share,
        wakeups,
        settle_secs,
    })
}
