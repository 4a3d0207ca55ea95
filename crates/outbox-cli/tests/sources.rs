//! One relay for many sources, as users run it: databases on two servers,
//! tenant schemas found by a pattern, plain-SQL producers, `outbox relay`
//! processes over one config file. Each source's events are delivered at
//! least once and in order per aggregate through a SIGKILL and a database
//! outage; new tenant schemas are served and dropped ones let go while the
//! relay runs; `/readyz` names the source that is down.
//!
//! Longer than most files: the three guarantees share the setting (the
//! servers, the config file, the producers, the delivery checks), which is
//! why they stay together.

mod common;

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::Child;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use outbox::Schema;
use outbox_testkit::postgres::{test_db, PgCluster};
use outbox_testkit::{first_delivery_violation, wait_until};
use sqlx::PgPool;
use uuid::Uuid;

/// How long a relay's lease lasts here: a SIGKILLed relay's partitions
/// move to the other relay this soon.
const LEASE_MS: u64 = 1_500;

/// Where a producer writes: a database's schema and the prefix of its
/// aggregate ids, which makes them unique per source (`t07-a3`) so that
/// order can be checked per source without the message naming the source.
#[derive(Clone)]
struct Target {
    pool: PgPool,
    schema: String,
    prefix: String,
    aggregates: i64,
}

/// What was produced: each event's aggregate and position in it.
type Ledger = HashMap<Uuid, (String, i64)>;

impl Target {
    /// Round `n`: event `n` of each of the target's aggregates, in one
    /// plain-SQL statement (every other column has its default, as for any
    /// producer).
    async fn round(&self, n: i64) -> Result<Vec<(Uuid, String)>, sqlx::Error> {
        sqlx::query_as(&format!(
            "INSERT INTO {}.outbox_events (aggregate_type, aggregate_id, event_type, payload)
             SELECT 'order', $3 || '-a' || a, 'order.updated', jsonb_build_object('n', $1::bigint)
             FROM generate_series(0, $2 - 1) AS a
             RETURNING id, aggregate_id",
            self.schema
        ))
        .bind(n)
        .bind(self.aggregates)
        .bind(&self.prefix)
        .fetch_all(&self.pool)
        .await
    }

    /// [`Target::round`], which must succeed, noted in `ledger`.
    async fn round_into(&self, n: i64, ledger: &Mutex<Ledger>) {
        let rows = self
            .round(n)
            .await
            .unwrap_or_else(|e| panic!("round {n} into {}: {e}", self.prefix));
        note(ledger, rows, n);
    }

    /// One event of aggregate `{prefix}-{name}`, noted in `ledger`.
    async fn one(&self, name: &str, ledger: &Mutex<Ledger>) -> Uuid {
        let (id, agg): (Uuid, String) = sqlx::query_as(&format!(
            "INSERT INTO {}.outbox_events (aggregate_type, aggregate_id, event_type, payload)
             VALUES ('order', $1, 'order.updated', '{{\"n\": 0}}') RETURNING id, aggregate_id",
            self.schema
        ))
        .bind(format!("{}-{name}", self.prefix))
        .fetch_one(&self.pool)
        .await
        .unwrap_or_else(|e| panic!("one event into {}: {e}", self.prefix));
        note(ledger, vec![(id, agg)], 0);
        id
    }
}

fn note(ledger: &Mutex<Ledger>, rows: Vec<(Uuid, String)>, n: i64) {
    let mut ledger = ledger.lock().unwrap();
    for (id, agg) in rows {
        ledger.insert(id, (agg, n));
    }
}

/// Migrates `schema` (created if missing) on `pool` with the library, as
/// `outbox migrate --schema` does.
async fn migrate(pool: &PgPool, schema: &str) {
    let mut conn = pool.acquire().await.unwrap();
    outbox::migrate(
        &mut conn,
        &Schema::new(schema).unwrap(),
        &Default::default(),
    )
    .await
    .unwrap_or_else(|e| panic!("migrating {schema}: {e}"));
}

/// Migrates `names` on `pool`, a few at a time.
async fn migrate_all(pool: &PgPool, names: &[String]) {
    for chunk in names.chunks(5) {
        futures::future::join_all(chunk.iter().map(|s| migrate(pool, s))).await;
    }
}

/// `tenant_01` … `tenant_{n}`.
fn tenants(from: usize, to: usize) -> Vec<String> {
    (from..=to).map(|i| format!("tenant_{i:02}")).collect()
}

/// A second server, one that can be stopped, with a database `name`
/// migrated in `public`: the cluster, the database's URL and a pool.
async fn stoppable_database(name: &str) -> (PgCluster, String, PgPool) {
    let cluster = tokio::task::spawn_blocking(PgCluster::start)
        .await
        .unwrap()
        .expect("start a second PostgreSQL");
    let admin = sqlx::PgPool::connect(&cluster.url()).await.unwrap();
    sqlx::raw_sql(&format!("CREATE DATABASE {name}"))
        .execute(&admin)
        .await
        .unwrap();
    admin.close().await;
    let url = cluster.url_for(name);
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(4)
        .connect(&url)
        .await
        .unwrap();
    migrate(&pool, "public").await;
    (cluster, url, pool)
}

/// Stops (`up` false) or starts again the server `cluster`, off the async
/// runtime.
async fn set_running(cluster: PgCluster, up: bool) -> PgCluster {
    tokio::task::spawn_blocking(move || {
        let mut cluster = cluster;
        if up {
            cluster.restart().expect("restart the second PostgreSQL");
        } else {
            cluster.stop().expect("stop the second PostgreSQL");
        }
        cluster
    })
    .await
    .unwrap()
}

/// One `[[source]]` entry: its name, database URL and the line choosing
/// its schemas (`schema = "public"` or `schemas = "tenant_*"`).
struct Entry<'a>(&'a str, &'a str, &'a str);

/// A config file for a relay of `entries` publishing to the JSON-lines
/// file `publisher`, with `sources` (the lines of the `[sources]` table).
fn write_config(path: &Path, entries: &[Entry<'_>], publisher: &Path, sources: &str) {
    let mut text = format!(
        "database_url = {:?}\npublisher = {:?}\n\n[relay]\nlease_ms = {LEASE_MS}\nbatch_size = {}\npoll_max_ms = 50\n\n[sources]\n{sources}\n",
        entries[0].1,
        format!("file:{}", publisher.display()),
        common::BATCH_SIZE,
    );
    for Entry(name, url, select) in entries {
        text += &format!("\n[[source]]\nname = {name:?}\ndatabase_url = {url:?}\n{select}\n");
    }
    std::fs::write(path, text).unwrap();
}

/// A running `outbox relay` with a config file of its own: where it
/// publishes and logs. Killed when dropped (a failed test leaves nothing
/// running).
struct RelayProcess {
    child: Child,
    events: PathBuf,
    log: PathBuf,
}

impl RelayProcess {
    /// Writes `NAME.toml` in `dir` (publishing to `NAME.jsonl`) and starts
    /// the relay on it as instance `NAME`, logging to `NAME.log`.
    fn start(dir: &Path, name: &str, entries: &[Entry<'_>], sources: &str, extra: &[&str]) -> Self {
        let config = dir.join(format!("{name}.toml"));
        let events = dir.join(format!("{name}.jsonl"));
        let log = dir.join(format!("{name}.log"));
        write_config(&config, entries, &events, sources);
        let child = common::spawn_relay_with_config(&config, name, &log, extra);
        RelayProcess { child, events, log }
    }

    fn deliveries(&self) -> Vec<(String, String, i64)> {
        common::read_deliveries(&self.events)
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Fails the test, showing the log, if the relay has exited.
    fn assert_running(&mut self) {
        if let Some(status) = self.child.try_wait().unwrap() {
            panic!("outbox relay exited early ({status}):\n{}", self.log_text());
        }
    }

    /// SIGTERM; it must exit 0 within 30 s.
    fn stop(&mut self) {
        let status = common::stop_gracefully(&mut self.child, Duration::from_secs(30));
        assert!(
            status.is_some_and(|s| s.success()),
            "a graceful stop exits 0 ({status:?}):\n{}",
            self.log_text()
        );
    }
}

impl Drop for RelayProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Every event id delivered to any of `files`.
fn delivered_ids(files: &[PathBuf]) -> HashSet<Uuid> {
    files
        .iter()
        .flat_map(|f| common::read_deliveries(f))
        .map(|(id, _, _)| id.parse().expect("an event id"))
        .collect()
}

/// Three databases on two servers, 52 sources (one plain schema, 50 tenant
/// schemas found by `tenant_*`, one database on a server that is stopped
/// mid-run), plain-SQL producers writing to all of them, two relays over
/// the same sources, one SIGKILLed and restarted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_source_is_delivered_in_order_through_a_sigkill_and_a_database_outage() {
    let started = Instant::now();
    let plain_db = test_db().await;
    let plain_pool = plain_db.pool().await;
    migrate(&plain_pool, "public").await;
    let saas_db = test_db().await;
    let saas_pool = saas_db.pool().await;
    let tenant_names = tenants(1, 50);
    migrate_all(&saas_pool, &tenant_names).await;
    let (cluster, remote_url, remote_pool) = stoppable_database("orders").await;
    eprintln!("setting up: {:?}", started.elapsed());

    let plain = Target {
        pool: plain_pool.clone(),
        schema: "public".into(),
        prefix: "p".into(),
        aggregates: 24,
    };
    let remote = Target {
        pool: remote_pool.clone(),
        schema: "public".into(),
        prefix: "b".into(),
        aggregates: 24,
    };
    let mut healthy = vec![plain.clone()];
    for (i, s) in tenant_names.iter().enumerate() {
        healthy.push(Target {
            pool: saas_pool.clone(),
            schema: s.clone(),
            prefix: format!("t{:02}", i + 1),
            aggregates: 4,
        });
    }
    let entries = [
        Entry("plain", &plain_db.url, "schema = \"public\""),
        Entry("tenants", &saas_db.url, "schemas = \"tenant_*\""),
        Entry("remote", &remote_url, "schema = \"public\""),
    ];
    let sources = "rescan_secs = 5\ncheck_ms = 200";

    // A backlog in every source before the relays start.
    let ledger = Arc::new(Mutex::new(Ledger::new()));
    for n in 0..5 {
        for t in healthy.iter().chain([&remote]) {
            t.round_into(n, &ledger).await;
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let mut first = RelayProcess::start(dir.path(), "relay-1", &entries, sources, &[]);
    let mut second = RelayProcess::start(dir.path(), "relay-2", &entries, sources, &[]);

    // Producers keep writing a round into every source every ~100 ms; the
    // stopped database is skipped while it is down (`remote_up`, held
    // across each of its inserts, so none is cut off half-committed).
    let remote_up = Arc::new(tokio::sync::Mutex::new(true));
    let round = Arc::new(AtomicI64::new(5));
    let stop_producing = Arc::new(AtomicBool::new(false));
    let producer = {
        let (ledger, remote_up, round, stop) = (
            ledger.clone(),
            remote_up.clone(),
            round.clone(),
            stop_producing.clone(),
        );
        let (healthy, remote) = (healthy.clone(), remote.clone());
        tokio::spawn(async move {
            while !stop.load(Ordering::SeqCst) {
                let n = round.load(Ordering::SeqCst);
                for t in &healthy {
                    t.round_into(n, &ledger).await;
                }
                {
                    let up = remote_up.lock().await;
                    if *up {
                        remote.round_into(n, &ledger).await;
                    }
                }
                round.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    };

    // SIGKILL one relay once both deliver, and start it again (to a new
    // file: each file holds one process's contiguous run).
    let long = Duration::from_secs(60);
    wait_until("both relays to deliver", long, || async {
        !first.deliveries().is_empty() && !second.deliveries().is_empty()
    })
    .await;
    first.assert_running();
    second.assert_running();
    tokio::time::sleep(Duration::from_millis(rand::random_range(0..300))).await;
    first.child.kill().unwrap(); // SIGKILL
    first.child.wait().unwrap();
    let killed_at = first.deliveries().len();
    let restarted = RelayProcess::start(dir.path(), "relay-1b", &entries, sources, &[]);
    eprintln!("relay-1 SIGKILLed after {killed_at} deliveries; relay-1b started");

    // Stop the remote database's server for a few seconds, once the killed
    // relay's leases have lapsed; meanwhile the other sources keep being
    // delivered.
    tokio::time::sleep(Duration::from_millis(2 * LEASE_MS)).await;
    let files = [
        first.events.clone(),
        second.events.clone(),
        restarted.events.clone(),
    ];
    // What a healthy source's event takes now, to compare with the outage.
    let markers = |name: &'static str| {
        let (plain, tenant, ledger) = (&plain, &healthy[50], &ledger);
        async move {
            vec![
                plain.one(name, ledger).await,
                tenant.one(name, ledger).await,
            ]
        }
    };
    let delivered_within = |ids: Vec<Uuid>, what: &'static str| {
        let files = &files;
        async move {
            let from = Instant::now();
            wait_until(what, Duration::from_secs(60), || async {
                ids.iter().all(|id| delivered_ids(files).contains(id))
            })
            .await;
            from.elapsed()
        }
    };
    let healthy_before = delivered_within(
        markers("before-outage").await,
        "the healthy sources to deliver before the outage",
    )
    .await;
    let pending_remote: i64 = {
        let mut up = remote_up.lock().await;
        *up = false;
        sqlx::query_scalar(
            "SELECT count(*) FROM outbox_events
             WHERE processed_at IS NULL AND dead_lettered_at IS NULL",
        )
        .fetch_one(&remote_pool)
        .await
        .unwrap()
    };
    // A backlog just before the stop (aggregates of their own), so that
    // some of it is left for after the return.
    let held = Target {
        prefix: "b-held".into(),
        aggregates: 2_000,
        ..remote.clone()
    };
    let backlog = held.round(0).await.unwrap();
    let backlog_ids: Vec<Uuid> = backlog.iter().map(|(id, _)| *id).collect();
    note(&ledger, backlog, 0);
    let cluster = set_running(cluster, false).await;
    let down_at = Instant::now();
    let healthy_latency = delivered_within(
        markers("during-outage").await,
        "the healthy sources to deliver while a database is down",
    )
    .await;
    // And everything the healthy sources were given before those.
    let healthy_ids: HashSet<Uuid> = ledger
        .lock()
        .unwrap()
        .iter()
        .filter(|(_, (agg, _))| !agg.starts_with("b-"))
        .map(|(id, _)| *id)
        .collect();
    wait_until(
        "the healthy sources' backlog delivered while a database is down",
        long,
        || async { delivered_ids(&files).is_superset(&healthy_ids) },
    )
    .await;
    let healthy_drained = down_at.elapsed();
    if let Some(left) = Duration::from_secs(3).checked_sub(down_at.elapsed()) {
        tokio::time::sleep(left).await;
    }
    let seen = delivered_ids(&files);
    let left_for_return = backlog_ids.iter().filter(|id| !seen.contains(id)).count();
    let cluster = set_running(cluster, true).await;
    let back_round = round.load(Ordering::SeqCst) + 1;
    *remote_up.lock().await = true;
    eprintln!(
        "remote down {:?} ({pending_remote} pending before a backlog of {} more, {left_for_return} of which left for its return); a healthy source's event took {healthy_latency:?} in it ({healthy_before:?} before it), all they had went out {healthy_drained:?} into it",
        down_at.elapsed(),
        backlog_ids.len()
    );

    // Keep producing a little after its return, then wait for everything.
    wait_until("rounds after the return", long, || async {
        round.load(Ordering::SeqCst) >= back_round + 5
    })
    .await;
    stop_producing.store(true, Ordering::SeqCst);
    producer.await.unwrap();
    let produced = ledger.lock().unwrap().clone();
    let mut relays = [second, restarted];
    let ids: HashSet<Uuid> = produced.keys().copied().collect();
    wait_until("every event delivered", Duration::from_secs(120), || {
        let (ids, files) = (&ids, &files);
        async move { delivered_ids(files).is_superset(ids) }
    })
    .await;
    for r in &mut relays {
        r.assert_running();
    }

    // Nothing invented; every event of every source delivered; order per
    // aggregate in each process's run.
    let all = delivered_ids(&files);
    let invented: Vec<_> = all.difference(&ids).take(5).collect();
    assert!(
        invented.is_empty(),
        "delivered but never produced: {invented:?}"
    );
    let mut lines = 0;
    for (file, relay) in files.iter().zip(["relay-1", "relay-2", "relay-1b"]) {
        let got = common::read_deliveries(file);
        lines += got.len();
        assert!(!got.is_empty(), "{relay} delivered nothing");
        if let Some(v) = first_delivery_violation(got.iter().map(|(_, a, n)| (a.as_str(), *n))) {
            panic!("{relay}: per-aggregate order broken: {v}");
        }
    }
    // The stopped database's events written after its return went out too.
    let after: Vec<_> = produced
        .iter()
        .filter(|(_, (agg, n))| agg.starts_with("b-") && *n >= back_round)
        .collect();
    assert!(
        !after.is_empty(),
        "the remote database got rounds after its return"
    );
    let per_source = |prefix: &str| {
        produced
            .values()
            .filter(|(agg, _)| agg.starts_with(prefix))
            .count()
    };
    eprintln!(
        "{} events ({} plain, {} in 50 tenants, {} remote, {} after its return), {lines} lines, {} delivered again; {:?} in all",
        ids.len(),
        per_source("p-"),
        per_source("t"),
        per_source("b-"),
        after.len(),
        lines - all.len(),
        started.elapsed()
    );
    for r in &mut relays {
        r.stop();
    }
    drop(cluster);
}

/// A relay of `schemas = "tenant_*"` on a fresh database holding
/// `tenant_01` … `tenant_03`, re-matching every `rescan`; each tenant served
/// (one event delivered) before it returns.
struct Tenants {
    db: outbox_testkit::postgres::TestDb,
    pool: PgPool,
    relay: RelayProcess,
    /// The relay's `--http-addr` port.
    http: u16,
    ledger: Mutex<Ledger>,
    _dir: tempfile::TempDir,
}

impl Tenants {
    async fn start(rescan: Duration) -> Tenants {
        let db = test_db().await;
        let pool = db.pool().await;
        migrate_all(&pool, &tenants(1, 3)).await;
        let dir = tempfile::tempdir().unwrap();
        let sources = format!("rescan_secs = {}\ncheck_ms = 200", rescan.as_secs());
        let entries = [Entry("tenants", &db.url, "schemas = \"tenant_*\"")];
        let http = outbox_testkit::process::free_port();
        let addr = format!("127.0.0.1:{http}");
        let relay = RelayProcess::start(
            dir.path(),
            "relay",
            &entries,
            &sources,
            &["--http-addr", &addr],
        );
        let t = Tenants {
            db,
            pool,
            relay,
            http,
            ledger: Mutex::new(Ledger::new()),
            _dir: dir,
        };
        for i in 1..=3 {
            t.deliver(i, "first", Duration::from_secs(60)).await;
        }
        t
    }

    /// Writes one event into `tenant_{i}` and waits up to `within` for its
    /// delivery.
    async fn deliver(&self, i: usize, name: &str, within: Duration) {
        let target = Target {
            pool: self.pool.clone(),
            schema: format!("tenant_{i:02}"),
            prefix: format!("t{i:02}"),
            aggregates: 1,
        };
        let id = target.one(name, &self.ledger).await;
        let file = [self.relay.events.clone()];
        wait_until(
            &format!("tenant_{i:02}'s event {name} delivered"),
            within,
            || async { delivered_ids(&file).contains(&id) },
        )
        .await;
    }
}

/// Schema-per-tenant with `schemas = "tenant_*"`: a tenant created and
/// migrated by `outbox migrate` while the relay runs is served within the
/// rescan interval, beside the others.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_migrated_while_the_relay_runs_is_served_within_the_rescan_interval() {
    let rescan = Duration::from_secs(2);
    let mut t = Tenants::start(rescan).await;
    let out = common::run(&["migrate", "--schema", "tenant_51"], Some(&t.db.url));
    assert!(out.status.success(), "{}", common::text(&out.stderr));
    let migrated = Instant::now();
    // The rescan interval, and slack for a loaded machine.
    t.deliver(51, "new", rescan + Duration::from_secs(3)).await;
    eprintln!(
        "tenant_51 served {:?} after its migration",
        migrated.elapsed()
    );
    for i in [1, 3] {
        t.deliver(i, "beside-the-new", Duration::from_secs(30))
            .await;
    }
    t.relay.assert_running();
    t.relay.stop();
}

/// What the relay did around a `DROP SCHEMA tenant_02 CASCADE`.
struct Dropped {
    /// Its log from the drop on.
    log: String,
    /// `/metrics` before the drop and three rescans after it.
    metrics_before: String,
    metrics_after: String,
    /// Rounds delivered to the other tenants meanwhile.
    rounds: usize,
    /// Three rescan intervals.
    watched: Duration,
}

/// Drops `tenant_02` under a relay re-matching every `rescan`, and keeps
/// writing to and waiting for the other tenants for three rescans.
async fn drop_a_tenant(rescan: Duration) -> Dropped {
    let mut t = Tenants::start(rescan).await;
    let metrics = |port| async move {
        common::http_get(port, "/metrics")
            .await
            .map(|(_, body)| body)
            .unwrap_or_default()
    };
    let metrics_before = metrics(t.http).await;
    let log_before = t.relay.log_text().len();
    sqlx::raw_sql("DROP SCHEMA tenant_02 CASCADE")
        .execute(&t.pool)
        .await
        .unwrap();
    let watched = 3 * rescan;
    let until = Instant::now() + watched;
    let mut rounds = 0;
    while Instant::now() < until {
        for i in [1, 3] {
            t.deliver(i, &format!("after-drop-{rounds}"), Duration::from_secs(30))
                .await;
        }
        rounds += 1;
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    t.relay.assert_running();
    let metrics_after = metrics(t.http).await;
    let log = t.relay.log_text()[log_before..].to_owned();
    t.relay.stop();
    Dropped {
        log,
        metrics_before,
        metrics_after,
        rounds,
        watched,
    }
}

/// Schema-per-tenant: a tenant dropped while the relay runs (`DROP SCHEMA
/// … CASCADE`) is let go, said so in the log and forgotten by the metrics,
/// while the others keep being delivered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_tenant_is_let_go_and_forgotten_while_the_others_keep_going() {
    let d = drop_a_tenant(Duration::from_secs(2)).await;
    let series = "source=\"tenants/tenant_02\"";
    assert!(
        d.metrics_before.contains(series),
        "the tenant has metrics while served:\n{}",
        d.metrics_before
    );
    assert!(
        !d.metrics_after.contains(series),
        "a tenant let go leaves no metrics:\n{}",
        d.metrics_after
    );
    assert!(
        d.log
            .lines()
            .any(|l| l.contains("tenant_02") && l.contains("\"INFO\"")),
        "letting the dropped tenant go is logged:\n{}",
        d.log
    );
    eprintln!(
        "{} rounds to the other tenants over {:?}",
        d.rounds, d.watched
    );
}

/// A dropped tenant is let go without error spam: each warning or error
/// naming it appears at most twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_tenant_is_not_complained_about_again_and_again() {
    let d = drop_a_tenant(Duration::from_secs(3)).await;
    let mut complaints: HashMap<String, usize> = HashMap::new();
    for line in d.log.lines().filter(|l| l.contains("tenant_02")) {
        let v: serde_json::Value = serde_json::from_str(line).unwrap_or_default();
        if matches!(v["level"].as_str(), Some("INFO" | "DEBUG" | "TRACE")) {
            continue;
        }
        let message = v["fields"]["message"].as_str().unwrap_or(line).to_owned();
        *complaints.entry(message).or_default() += 1;
    }
    let repeated: Vec<_> = complaints.iter().filter(|(_, n)| **n > 2).collect();
    assert!(
        repeated.is_empty(),
        "complaints about the dropped tenant repeated within {:?}: {repeated:?}\n{}",
        d.watched,
        d.log
    );
}

/// `/readyz` of a relay of two sources on two servers while one server is
/// down: with `ready = "all"` 503 naming the source that is down (200 again
/// once it is back); with `ready = "any"` 200 throughout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_names_the_source_whose_database_is_down_and_follows_the_ready_policy() {
    let db = test_db().await;
    migrate(&db.pool().await, "public").await;
    let (cluster, remote_url, _remote_pool) = stoppable_database("billing").await;
    let entries = [
        Entry("main", &db.url, "schema = \"public\""),
        Entry("billing", &remote_url, "schema = \"public\""),
    ];
    let dir = tempfile::tempdir().unwrap();
    let all_port = outbox_testkit::process::free_port();
    let any_port = outbox_testkit::process::free_port();
    let start = |name: &str, ready: &str, port: u16| {
        RelayProcess::start(
            dir.path(),
            name,
            &entries,
            &format!("ready = {ready:?}\ncheck_ms = 200"),
            &["--http-addr", &format!("127.0.0.1:{port}")],
        )
    };
    let mut all = start("ready-all", "all", all_port);
    let mut any = start("ready-any", "any", any_port);
    let status = |port: u16| async move { common::http_get(port, "/readyz").await };
    let long = Duration::from_secs(60);
    for port in [all_port, any_port] {
        wait_until("both relays ready", long, || async {
            status(port).await.is_some_and(|(s, _)| s == 200)
        })
        .await;
    }

    let cluster = set_running(cluster, false).await;
    let down_at = Instant::now();
    let mut any_answers = Vec::new();
    let body = loop {
        any_answers.push(status(any_port).await);
        if let Some((503, body)) = status(all_port).await {
            break body;
        }
        assert!(
            down_at.elapsed() < long,
            "ready = \"all\" did not turn 503 within {long:?} of a database going down:\n{}",
            all.log_text()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let noticed = down_at.elapsed();
    assert!(
        body.contains("billing"),
        "503 names the source that is down: {body}"
    );
    // As long again, and at least 2 s, "any" must still say ready.
    let until = Instant::now() + noticed.max(Duration::from_secs(2));
    while Instant::now() < until {
        any_answers.push(status(any_port).await);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let not_ready: Vec<_> = any_answers
        .iter()
        .filter(|a| a.as_ref().is_none_or(|(s, _)| *s != 200))
        .collect();
    assert!(
        not_ready.is_empty(),
        "ready = \"any\" stays 200 while one source is down: {not_ready:?}"
    );

    let cluster = set_running(cluster, true).await;
    wait_until("ready = \"all\" to return to 200", long, || async {
        status(all_port).await.is_some_and(|(s, _)| s == 200)
    })
    .await;
    assert_eq!(status(any_port).await.map(|(s, _)| s), Some(200));
    all.assert_running();
    any.assert_running();
    eprintln!(
        "ready = \"all\" turned 503 {noticed:?} after the stop, {} answers of \"any\" all 200",
        any_answers.len()
    );
    all.stop();
    any.stop();
    drop(cluster);
}

/// `outbox bench sources` at a tiny size runs every phase and reports
/// every figure (speed is not asserted: shared machines are noisy).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bench_sources_reports_connections_cpu_wakeups_drain_and_fairness() {
    let (_db, v, stdout) = common::bench_fresh(
        "sources --schemas 3 --pool-size 4 --idle-secs 1 --wakeups 3 --wakeup-gap-ms 10 \
         --events-per-schema 200 --aggregates-per-schema 5 --backlog 20000 --rate 20 --seconds 1",
    )
    .await;
    eprintln!("{stdout}");
    assert_eq!(v["schemas"], 3);
    assert_eq!(v["wakeups"], 3);
    assert_eq!(v["drain_events"], 600);
    assert_eq!(v["connection_limit"], 5);
    let connections = v["relay_connections"].as_i64().unwrap();
    assert!(connections >= 1, "the relay's sessions are seen: {v}");
    let positive = [
        "wakeup_p50_ms",
        "wakeup_p99_ms",
        "one_schema_wakeup_p50_ms",
        "one_schema_wakeup_p99_ms",
        "wakeup_p99_ratio",
        "drain_many_events_per_sec",
        "drain_one_events_per_sec",
        "drain_many_relay_us_per_event",
        "drain_one_relay_us_per_event",
        "drain_ratio",
        "fairness_p99_alone_ms",
        "fairness_p99_with_backlog_ms",
        "fairness_ratio",
    ];
    for k in positive {
        assert!(v[k].as_f64().is_some_and(|x| x > 0.0), "{k}: {v}");
    }
    assert!(
        v["wakeup_p50_ms"].as_f64() <= v["wakeup_p99_ms"].as_f64(),
        "{v}"
    );
    for k in [
        "idle_core_share",
        "one_schema_idle_core_share",
        "idle_process_core_share",
        "idle_sessions_core_share",
    ] {
        assert!(v[k].as_f64().is_some_and(|x| x >= 0.0), "{k}: {v}");
    }
    assert!(
        v["fairness_samples_with_backlog"].as_u64() >= Some(1),
        "{v}"
    );
    assert_eq!(v["fairness_samples_alone"], 20, "{v}");
}
