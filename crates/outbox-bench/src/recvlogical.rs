//! The WAL mode's reference: `pg_recvlogical`, PostgreSQL's own client of a
//! logical slot, reading the messages of the relay's publication from a slot
//! of its own to /dev/null. What it and its walsender cost is what reading
//! the stream costs on this server before any relay work: `bench drain
//! --mode wal` reads a backlog with it, `bench latency --mode wal` runs it
//! at the same rate as the relay.

use std::future::Future;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use sqlx::PgPool;

use super::held_snapshot::cpu_seconds;
use super::relay_cpu::core_share;

/// The reference's slot, made beside the relay's.
pub const SLOT: &str = "bench_recvlogical";

/// Creates the reference's slot (`pgoutput`), at the server's current
/// position; one left from an earlier run goes first.
pub async fn create_slot(pool: &PgPool) -> Result<()> {
    drop_slot(pool).await?;
    sqlx::query("SELECT pg_create_logical_replication_slot($1, 'pgoutput')")
        .bind(SLOT)
        .execute(pool)
        .await?;
    Ok(())
}

/// Drops the reference's slot, if it is there and nobody reads it.
pub async fn drop_slot(pool: &PgPool) -> Result<()> {
    sqlx::query("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1 AND NOT active")
        .bind(SLOT)
        .execute(pool)
        .await?;
    Ok(())
}

/// `pg_recvlogical` reading the reference's slot with the messages of
/// `publication` to /dev/null, reporting its position every
/// `status_secs` and never syncing /dev/null; up to `end` when given
/// (then it exits there), else until it is killed.
pub fn command(
    url: &str,
    publication: &str,
    end: Option<&str>,
    status_secs: u32,
) -> Result<Command> {
    let bin = outbox_embedded_pg::find_bin_dir()
        .context("pg_recvlogical is needed for the reference")?
        .join("pg_recvlogical");
    let mut cmd = Command::new(bin);
    cmd.args(["-d", url, "--slot", SLOT, "--start", "--no-loop"])
        .args(["-f", "/dev/null", "-F", "0", "-s", &status_secs.to_string()])
        .args(["-o", "proto_version=1", "-o", "messages=true"])
        .args(["-o", &format!("publication_names={publication}")]);
    if let Some(end) = end {
        cmd.args(["--endpos", end]);
    }
    Ok(cmd)
}

/// The pid of the walsender streaming `slot` and its CPU seconds so far,
/// if one does.
pub async fn walsender_cpu(pool: &PgPool, slot: &str) -> Result<Option<(u32, f64)>> {
    let pid: Option<Option<i32>> =
        sqlx::query_scalar("SELECT active_pid FROM pg_replication_slots WHERE slot_name = $1")
            .bind(slot)
            .fetch_optional(pool)
            .await?;
    Ok(pid
        .flatten()
        .and_then(|pid| cpu_seconds(pid as u32).map(|s| (pid as u32, s))))
}

/// Whether `slot` has confirmed `lsn`.
pub async fn confirmed(pool: &PgPool, slot: &str, lsn: &str) -> Result<bool> {
    Ok(sqlx::query_scalar(
        "SELECT coalesce(confirmed_flush_lsn >= $2::pg_lsn, false) FROM pg_replication_slots WHERE slot_name = $1",
    )
    .bind(slot)
    .bind(lsn)
    .fetch_one(pool)
    .await?)
}

/// What the reference cost at one rate: share of a core while idle, and
/// CPU per event of its process and of its walsender while the schedule
/// ran until it had confirmed the last event.
#[derive(Debug, Clone, Copy)]
pub struct AtRate {
    pub idle_core_share: f64,
    pub process_us_per_event: f64,
    pub walsender_us_per_event: f64,
}

/// Starts `pg_recvlogical` on a fresh reference slot of `publication`,
/// lets it idle for `idle`, then runs `schedule` (which commits `events`
/// events) and waits until the slot has confirmed the server's position
/// after it; the slot is dropped again.
pub async fn at_rate<Fut>(
    url: &str,
    pool: &PgPool,
    publication: &str,
    idle: Duration,
    events: u64,
    schedule: Fut,
) -> Result<AtRate>
where
    Fut: Future<Output = Result<()>>,
{
    create_slot(pool).await?;
    let mut cmd = command(url, publication, None, 1)?;
    cmd.stdout(Stdio::null()).stderr(Stdio::inherit());
    let mut child = cmd.spawn().context("cannot start pg_recvlogical")?;
    let measured = measure(pool, &mut child, idle, events, schedule).await;
    let _ = child.kill();
    let _ = child.wait();
    drop_slot(pool).await?;
    measured
}

async fn measure<Fut>(
    pool: &PgPool,
    child: &mut Child,
    idle: Duration,
    events: u64,
    schedule: Fut,
) -> Result<AtRate>
where
    Fut: Future<Output = Result<()>>,
{
    let pid = child.id();
    let walsender = wait_while_running(
        child,
        "start streaming",
        Duration::from_secs(30),
        || async { Ok(walsender_cpu(pool, SLOT).await?.map(|(wpid, _)| wpid)) },
    )
    .await?;
    let read = || -> Result<(f64, f64)> {
        Ok((
            cpu_seconds(pid).context("pg_recvlogical is gone")?,
            cpu_seconds(walsender).context("its walsender is gone")?,
        ))
    };
    let idle_from = (read()?, Instant::now());
    tokio::time::sleep(idle).await;
    let busy_from = read()?;
    let idle_core_share = core_share(idle_from.0, busy_from, idle_from.1.elapsed().as_secs_f64());
    schedule.await?;
    let end: String = sqlx::query_scalar("SELECT pg_current_wal_lsn()::text")
        .fetch_one(pool)
        .await?;
    wait_while_running(
        child,
        &format!("confirm {end}"),
        Duration::from_secs(60),
        || async { Ok(confirmed(pool, SLOT, &end).await?.then_some(())) },
    )
    .await?;
    let after = read()?;
    let per = |s: f64| s / events.max(1) as f64 * 1e6;
    Ok(AtRate {
        idle_core_share,
        process_us_per_event: per(after.0 - busy_from.0),
        walsender_us_per_event: per(after.1 - busy_from.1),
    })
}

/// Waits until `done` gives a value, failing if `child` (pg_recvlogical)
/// ends or `limit` passes first; `what` is what it waits for it to do.
async fn wait_while_running<T, F, Fut>(
    child: &mut Child,
    what: &str,
    limit: Duration,
    mut done: F,
) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Option<T>>>,
{
    let deadline = Instant::now() + limit;
    loop {
        if let Some(value) = done().await? {
            return Ok(value);
        }
        if let Some(status) = child.try_wait()? {
            bail!("pg_recvlogical ended with {status} before it could {what}");
        }
        ensure!(
            Instant::now() < deadline,
            "pg_recvlogical did not {what} within {} s",
            limit.as_secs()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
