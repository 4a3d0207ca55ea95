//! `[[source]]` entries over schemas in either delivery mode: a pattern
//! that matches a table-mode schema and a WAL-mode one delivers both, each
//! in order, with `outbox relay` as its own process and producers calling
//! `outbox_emit` by plain SQL; a pause of the WAL-mode schema holds it;
//! SIGKILLs of the relay while producers write lose nothing and reorder
//! nothing in either mode.

mod common;

use std::time::{Duration, Instant};

use sqlx::PgPool;

async fn emit(pool: &PgPool, schema: &str, agg: &str, n: i64) -> uuid::Uuid {
    sqlx::query_scalar(&format!(
        "SELECT {schema}.outbox_emit('order', $1, 'order.updated', jsonb_build_object('n', $2::bigint))"
    ))
    .bind(agg)
    .bind(n)
    .fetch_one(pool)
    .await
    .unwrap()
}

/// Waits until `n` distinct events are in `file`, showing the relay's log
/// if they do not come.
fn wait_for(file: &std::path::Path, n: usize, log: &std::path::Path) {
    let started = Instant::now();
    let distinct = || {
        common::read_deliveries(file)
            .into_iter()
            .map(|(id, _, _)| id)
            .collect::<std::collections::HashSet<_>>()
            .len()
    };
    while distinct() < n {
        assert!(
            started.elapsed() < Duration::from_secs(90),
            "{} of {n} distinct events delivered; the relay's log:\n{}",
            distinct(),
            std::fs::read_to_string(log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A logical cluster with schema `<prefix>_1` in the table mode and
/// `<prefix>_2` in the WAL mode, and a config whose one `[[source]]`
/// entry, `name`, serves `<prefix>_*` to a file.
struct Fixture {
    _cluster: outbox_testkit::postgres::PgCluster,
    _dir: tempfile::TempDir,
    pool: PgPool,
    config: std::path::PathBuf,
    events: std::path::PathBuf,
    log: std::path::PathBuf,
}

impl Fixture {
    async fn start(prefix: &str, name: &str) -> Fixture {
        let cluster =
            tokio::task::spawn_blocking(|| outbox_testkit::postgres::logical_cluster(&[]))
                .await
                .unwrap();
        let url = cluster.url();
        for (schema, mode) in [
            (format!("{prefix}_1"), "table"),
            (format!("{prefix}_2"), "wal"),
        ] {
            let out = common::run(
                &["--schema", &schema, "migrate", "--mode", mode],
                Some(&url),
            );
            assert!(out.status.success(), "{}", common::text(&out.stderr));
        }
        let pool = PgPool::connect(&url).await.unwrap();
        let dir = tempfile::tempdir().unwrap();
        let (config, events, log) = (
            dir.path().join("relay.toml"),
            dir.path().join("events.jsonl"),
            dir.path().join("relay.log"),
        );
        std::fs::write(
            &config,
            format!(
                "database_url = {url:?}\npublisher = {:?}\n\n[relay]\nlease_ms = 1500\npoll_max_ms = 50\n\n[[source]]\nname = {name:?}\ndatabase_url = {url:?}\nschemas = \"{prefix}_*\"\n",
                format!("file:{}", events.display())
            ),
        )
        .unwrap();
        Fixture {
            _cluster: cluster,
            _dir: dir,
            pool,
            config,
            events,
            log,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pattern_over_a_table_mode_and_a_wal_mode_schema_delivers_both_in_order() {
    let f = Fixture::start("t", "tenants").await;
    let (pool, config, events, log) = (
        f.pool.clone(),
        f.config.clone(),
        f.events.clone(),
        f.log.clone(),
    );
    let mut relay = common::spawn_relay_with_config(&config, "r1", &log, &[]);
    let mut expected = Vec::new();
    for n in 1..=10 {
        for schema in ["t_1", "t_2"] {
            expected.push(emit(&pool, schema, &format!("{schema}-a"), n).await);
        }
    }
    let (f, l) = (events.clone(), log.clone());
    let want = expected.len();
    tokio::task::spawn_blocking(move || wait_for(&f, want, &l))
        .await
        .unwrap();
    // A pause of the WAL-mode schema holds its events; resumed, they go.
    sqlx::query("INSERT INTO t_2.outbox_pauses (aggregate_type) VALUES ('order')")
        .execute(&pool)
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let held = emit(&pool, "t_2", "t_2-a", 11).await;
    expected.push(held);
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    assert!(
        !common::read_deliveries(&events)
            .iter()
            .any(|(id, _, _)| *id == held.to_string()),
        "a paused event was delivered"
    );
    sqlx::query("DELETE FROM t_2.outbox_pauses")
        .execute(&pool)
        .await
        .unwrap();
    let (f, l) = (events.clone(), log.clone());
    let want = expected.len();
    tokio::task::spawn_blocking(move || wait_for(&f, want, &l))
        .await
        .unwrap();
    // Panics on an event lost or out of its aggregate's order.
    let (delivered, duplicates) = common::check_deliveries(&events, &expected);
    assert_eq!((delivered, duplicates), (expected.len(), 0));
    assert!(
        common::stop_gracefully(&mut relay, Duration::from_secs(30)).is_some_and(|s| s.success()),
        "{}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkills_of_a_relay_of_sources_over_both_modes_lose_nothing_and_keep_order() {
    let f = Fixture::start("k", "kills").await;
    let (pool, config, events, log) = (
        f.pool.clone(),
        f.config.clone(),
        f.events.clone(),
        f.log.clone(),
    );
    // Producers write through every kill: three aggregates per schema.
    let mut expected = Vec::new();
    let mut n = 0;
    for round in 0..4 {
        let mut relay = common::spawn_relay_with_config(&config, &format!("r{round}"), &log, &[]);
        for _ in 0..15 {
            n += 1;
            for schema in ["k_1", "k_2"] {
                for agg in ["a", "b", "c"] {
                    expected.push(emit(&pool, schema, &format!("{schema}-{agg}"), n).await);
                }
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        if round < 3 {
            // SIGKILL: no graceful stop, nothing acknowledged or confirmed
            // past what was.
            relay.kill().unwrap();
            relay.wait().unwrap();
        } else {
            let (f, l) = (events.clone(), log.clone());
            let want = expected.len();
            tokio::task::spawn_blocking(move || wait_for(&f, want, &l))
                .await
                .unwrap();
            assert!(
                common::stop_gracefully(&mut relay, Duration::from_secs(30))
                    .is_some_and(|s| s.success()),
                "{}",
                std::fs::read_to_string(&log).unwrap_or_default()
            );
        }
    }
    // Panics on an event lost or out of its aggregate's order; a
    // redelivery after a kill is allowed (at least once).
    let (delivered, _duplicates) = common::check_deliveries(&events, &expected);
    assert!(delivered >= expected.len());
}
