//! `outbox dead-letters list|retry|discard` and `outbox cleanup`, run as a
//! program against a real PostgreSQL.

mod common;

use std::process::Output;

use outbox_testkit::postgres::{test_db, TestDb};
use sqlx::PgPool;
use uuid::Uuid;

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Runs `outbox ARGS` and returns its stdout, failing the test on a
/// non-zero exit.
fn ok(db: &TestDb, args: &[&str]) -> String {
    let out = common::run(args, Some(&db.url));
    assert!(out.status.success(), "{args:?} failed: {}", stderr(&out));
    stdout(&out)
}

/// [`ok`] with the arguments of `line`, split at spaces.
fn ok_line(db: &TestDb, line: &str) -> String {
    ok(db, &line.split(' ').collect::<Vec<_>>())
}

async fn setup() -> (TestDb, PgPool) {
    let db = test_db().await;
    ok(&db, &["migrate"]);
    let pool = db.pool().await;
    (db, pool)
}

/// Inserts event `n` of `agg`; dead-lettered when `dead`.
async fn insert(pool: &PgPool, agg: &str, n: i64, event_type: &str, dead: bool) -> Uuid {
    sqlx::query_scalar(
        "INSERT INTO outbox_events
             (aggregate_type, aggregate_id, event_type, payload, attempts, last_error,
              dead_lettered_at)
         VALUES ('order', $1, $2, jsonb_build_object('n', $3::bigint),
                 CASE WHEN $4 THEN 10 ELSE 0 END,
                 CASE WHEN $4 THEN 'broker said no to ' || $1 || E'/' || $3 || E'\nsecond line' END,
                 CASE WHEN $4 THEN now() - interval '1 hour' END)
         RETURNING id",
    )
    .bind(agg)
    .bind(event_type)
    .bind(n)
    .bind(dead)
    .fetch_one(pool)
    .await
    .unwrap()
}

async fn dead_ids(pool: &PgPool) -> Vec<Uuid> {
    sqlx::query_scalar("SELECT id FROM outbox_dead_letters ORDER BY seq")
        .fetch_all(pool)
        .await
        .unwrap()
}

fn json_ids(text: &str) -> Vec<Uuid> {
    let v: serde_json::Value = serde_json::from_str(text).unwrap();
    v.as_array()
        .unwrap()
        .iter()
        .map(|d| d["id"].as_str().unwrap().parse().unwrap())
        .collect()
}

#[tokio::test]
async fn list_retry_list_round_trip_and_the_relay_delivers_in_original_order() {
    let (db, pool) = setup().await;
    let mut a = Vec::new();
    for n in 1..=3 {
        a.push(insert(&pool, "a", n, "order.updated", true).await);
    }
    let b1 = insert(&pool, "b", 1, "order.created", true).await;

    // Table: a header, one line per dead letter in seq order, a count.
    let table = ok(&db, &["dead-letters", "list"]);
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines.len(), 6, "{table}");
    assert!(lines[0].starts_with("ID") && lines[0].contains("LAST ERROR"));
    for (line, id) in lines[1..5].iter().zip(a.iter().chain([&b1])) {
        assert!(line.starts_with(&id.to_string()), "{line}");
    }
    assert!(lines[1].contains("order/a") && lines[1].contains("broker said no to a/1 second"));
    assert_eq!(lines[5], "4 dead letters");

    let json = ok(&db, &["dead-letters", "list", "--json"]);
    assert_eq!(json_ids(&json), [a[0], a[1], a[2], b1]);
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v[0]["payload"]["n"], 1);
    assert_eq!(v[0]["attempts"], 10);
    let by_type = ok_line(&db, "dead-letters list --json --event-type order.created");
    assert_eq!(json_ids(&by_type), [b1]);
    let limited = common::run(&["dead-letters", "list", "--limit", "2"], Some(&db.url));
    assert!(stdout(&limited).contains("showing 2 of 4 dead letters"));

    let dry = ok_line(&db, "dead-letters retry --aggregate-id a --dry-run");
    assert!(
        dry.starts_with("would retry 3 dead letters (aggregate id a)\n"),
        "{dry}"
    );
    assert!(dry.contains(&a[2].to_string()) && !dry.contains(&b1.to_string()));
    assert!(dry.trim_end().ends_with("dry run: nothing changed"));
    assert_eq!(dead_ids(&pool).await.len(), 4, "a dry run changes nothing");

    let retried = ok(&db, &["dead-letters", "retry", "--aggregate-id", "a"]);
    assert_eq!(retried, "retried 3 dead letters (aggregate id a)\n");
    let after = ok(&db, &["dead-letters", "list", "--json"]);
    assert_eq!(json_ids(&after), [b1]);
    let attempts: i64 =
        sqlx::query_scalar("SELECT sum(attempts) FROM outbox_events WHERE aggregate_id = 'a'")
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(attempts, 0);

    // A relay then delivers them, in their original order.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("out.jsonl");
    let publisher = format!("file:{}", file.display());
    ok(
        &db,
        &[
            "relay",
            "--drain",
            "--publisher",
            &publisher,
            "--poll-max-ms",
            "50",
        ],
    );
    let delivered: Vec<_> = common::read_deliveries(&file)
        .into_iter()
        .map(|(id, agg, n)| (id.parse::<Uuid>().unwrap(), agg, n))
        .collect();
    let expected: Vec<_> = (1..=3)
        .map(|n| (a[n as usize - 1], "a".to_owned(), n))
        .collect();
    assert_eq!(delivered, expected);
    assert_eq!(dead_ids(&pool).await, [b1], "b1 is still a dead letter");
}

#[tokio::test]
async fn discard_needs_a_selector_and_prints_what_it_deleted() {
    let (db, pool) = setup().await;
    let a1 = insert(&pool, "a", 1, "order.updated", true).await;
    let a2 = insert(&pool, "a", 2, "order.updated", true).await;
    let b1 = insert(&pool, "b", 1, "order.created", true).await;
    let c1 = insert(&pool, "c", 1, "order.created", true).await;
    let pending = insert(&pool, "d", 1, "order.created", false).await;

    let none = common::run(&["dead-letters", "discard"], Some(&db.url));
    assert!(!none.status.success());
    let err = stderr(&none);
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    for choice in ["--id", "--aggregate-id", "--event-type", "--all"] {
        assert!(err.contains(choice), "{err} should name {choice}");
    }
    let both = common::run(
        &["dead-letters", "discard", "--all", "--aggregate-id", "a"],
        Some(&db.url),
    );
    assert!(!both.status.success());
    assert!(stderr(&both).contains("--all"), "{}", stderr(&both));
    assert_eq!(dead_ids(&pool).await.len(), 4, "nothing discarded");

    let dry = ok_line(
        &db,
        "dead-letters discard --event-type order.created --dry-run",
    );
    assert!(
        dry.starts_with("would discard 2 dead letters (event type order.created)\n"),
        "{dry}"
    );
    assert_eq!(dead_ids(&pool).await.len(), 4, "a dry run changes nothing");

    let by_type = ok_line(
        &db,
        "dead-letters discard --event-type order.created --aggregate-id b",
    );
    assert_eq!(
        by_type,
        "discarded 1 dead letter (aggregate id b, event type order.created)\n"
    );
    let (s1, s2) = (a1.to_string(), a2.to_string());
    let by_id = ok(&db, &["dead-letters", "discard", "--id", &s1, "--id", &s2]);
    assert_eq!(
        by_id,
        format!("discarded 2 dead letters (ids {s1}, {s2})\n")
    );
    let all = ok(&db, &["dead-letters", "discard", "--all"]);
    assert_eq!(all, "discarded 1 dead letter (all)\n");
    let left: Vec<Uuid> = sqlx::query_scalar("SELECT id FROM outbox_events")
        .fetch_all(&pool)
        .await
        .unwrap();
    assert_eq!(left, [pending], "pending events are never discarded");
    let _ = (b1, c1);
}

#[tokio::test]
async fn bad_ages_and_limits_name_the_fix() {
    let (db, _pool) = setup().await;
    let out = common::run(
        &["dead-letters", "list", "--older-than", "7x"],
        Some(&db.url),
    );
    assert!(!out.status.success());
    assert!(stderr(&out).contains("e.g. 30s"), "{}", stderr(&out));
    let out = common::run(&["dead-letters", "list", "--limit", "0"], Some(&db.url));
    assert!(!out.status.success());
    assert!(stderr(&out).contains("limit"), "{}", stderr(&out));
    let out = common::run(&["cleanup", "--batch-size", "0"], Some(&db.url));
    assert!(!out.status.success());
    assert!(stderr(&out).contains("batch_size"), "{}", stderr(&out));
}

#[tokio::test]
async fn cleanup_prints_rows_deleted_per_table() {
    let (db, pool) = setup().await;
    sqlx::raw_sql(
        "INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload, processed_at)
         SELECT 'order', 'old', 'order.updated', '{}', now() - interval '8 days'
         FROM generate_series(1, 5);
         INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload, processed_at)
         VALUES ('order', 'new', 'order.updated', '{}', now() - interval '6 days'),
                ('order', 'pending', 'order.updated', '{}', NULL);
         INSERT INTO processed_events (consumer, event_id, processed_at)
         SELECT 'billing', gen_random_uuid(), now() - interval '35 days' FROM generate_series(1, 3);
         INSERT INTO processed_events (consumer, event_id) VALUES ('billing', gen_random_uuid());",
    )
    .execute(&pool)
    .await
    .unwrap();
    let counts = || async {
        let events: i64 = sqlx::query_scalar("SELECT count(*) FROM outbox_events")
            .fetch_one(&pool)
            .await
            .unwrap();
        let marks: i64 = sqlx::query_scalar("SELECT count(*) FROM processed_events")
            .fetch_one(&pool)
            .await
            .unwrap();
        (events, marks)
    };

    let dry = ok(&db, &["cleanup", "--inbox-older-than", "30d", "--dry-run"]);
    assert!(
        dry.contains("public.outbox_events: would delete 5 rows (older than 7d, before "),
        "{dry}"
    );
    assert!(
        dry.contains("public.processed_events: would delete 3 rows (older than 30d"),
        "{dry}"
    );
    assert_eq!(counts().await, (7, 4), "a dry run deletes nothing");

    let events_only = ok(&db, &["cleanup", "--batch-size", "2"]);
    assert!(
        events_only.contains("public.outbox_events: deleted 5 rows (older than 7d"),
        "{events_only}"
    );
    assert!(events_only.contains("public.processed_events: not touched"));
    assert_eq!(counts().await, (2, 4));

    let both = ok(&db, &["cleanup", "--inbox-older-than", "30d"]);
    assert!(
        both.contains("public.outbox_events: deleted 0 rows"),
        "{both}"
    );
    assert!(
        both.contains("public.processed_events: deleted 3 rows"),
        "{both}"
    );
    assert_eq!(counts().await, (2, 1));
}
