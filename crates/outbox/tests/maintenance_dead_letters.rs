//! Dead-letter tooling: listing filters, retry (attempts reset, original
//! order kept by the relay), discard (needs a selector), dry runs.
//!
//! A little over 400 lines: one fixture of dead letters serves every filter.

mod common;

use std::time::Duration;

use common::{count, event, fast_config, position, start_relay, wait_for_count, EVENTS, LONG};
use outbox::{DeadLetterFilter, DeadLetters, Error, RelayConfig, Schema, Selector};
use outbox_testkit::{wait_until, Fail, Match, TestPublisher};
use sqlx::PgPool;
use uuid::Uuid;

/// Inserts event `n` of `agg` with plain SQL; dead-lettered `dead_ago`
/// (an interval such as `'3 hours'`) ago when given, else pending.
async fn insert(
    pool: &PgPool,
    (agg_type, agg, n): (&str, &str, i64),
    event_type: &str,
    dead_ago: Option<&str>,
) -> Uuid {
    sqlx::query_scalar(
        "INSERT INTO outbox_events
             (aggregate_type, aggregate_id, event_type, payload, attempts, last_error,
              dead_lettered_at)
         VALUES ($1, $2, $3, jsonb_build_object('n', $4::bigint),
                 CASE WHEN $5::interval IS NULL THEN 0 ELSE 3 END,
                 CASE WHEN $5::interval IS NULL THEN NULL ELSE 'boom ' || $2 END,
                 now() - $5::interval)
         RETURNING id",
    )
    .bind(agg_type)
    .bind(agg)
    .bind(event_type)
    .bind(n)
    .bind(dead_ago)
    .fetch_one(pool)
    .await
    .unwrap()
}

async fn dead(pool: &PgPool, agg: &str, n: i64, event_type: &str, ago: &str) -> Uuid {
    insert(pool, ("order", agg, n), event_type, Some(ago)).await
}

fn ids(page: &outbox::DeadLetterPage) -> Vec<Uuid> {
    page.items.iter().map(|d| d.id).collect()
}

/// The whole table, to show that something changed nothing.
async fn snapshot(pool: &PgPool) -> Vec<(String,)> {
    common::rows(
        pool,
        "SELECT to_jsonb(e)::text FROM outbox_events e ORDER BY seq",
    )
    .await
}

#[tokio::test]
async fn list_filters_by_type_aggregate_age_ids_and_limit_in_seq_order() {
    let ctx = common::setup().await;
    let p = &ctx.pool;
    let a1 = dead(p, "a", 1, "order.created", "3 hours").await;
    let a2 = dead(p, "a", 2, "order.updated", "2 hours").await;
    let b1 = dead(p, "b", 1, "order.created", "10 minutes").await;
    let c1 = insert(p, ("invoice", "c", 1), "invoice.sent", Some("1 day")).await;
    // Not dead letters: a pending event, a processed one, and a processed
    // one that was dead-lettered before (not in the view either).
    insert(p, ("order", "x", 1), "order.created", None).await;
    for agg in ["y", "z"] {
        let id = insert(p, ("order", agg, 1), "order.created", Some("5 hours")).await;
        sqlx::query("UPDATE outbox_events SET processed_at = now() WHERE id = $1")
            .bind(id)
            .execute(p)
            .await
            .unwrap();
    }
    common::execute(
        p,
        "UPDATE outbox_events SET dead_lettered_at = NULL WHERE aggregate_id = 'z'",
    )
    .await;
    // created_at runs against seq: the order must come from seq.
    common::execute(
        p,
        "UPDATE outbox_events SET created_at = now() - seq * interval '1 minute'",
    )
    .await;

    let dl = DeadLetters::new(&Schema::default());
    let mut conn = p.acquire().await.unwrap();
    let hour = Duration::from_secs(3_600);
    macro_rules! list {
        ($filter:expr) => {
            dl.list(&mut conn, &$filter).await.unwrap()
        };
    }

    let all = list!(DeadLetterFilter::default());
    assert_eq!(
        ids(&all),
        [a1, a2, b1, c1],
        "all dead letters, in seq order"
    );
    assert_eq!(all.total, 4);
    let first = &all.items[0];
    assert_eq!(
        (
            first.attempts,
            first.last_error.as_deref(),
            first.payload.get()
        ),
        (3, Some("boom a"), r#"{"n": 1}"#)
    );

    let f = |f: fn(&mut DeadLetterFilter)| {
        let mut filter = DeadLetterFilter::default();
        f(&mut filter);
        filter
    };
    let by_type = list!(f(|f| f.selector.event_type = Some("order.created".into())));
    assert_eq!(ids(&by_type), [a1, b1]);
    let by_agg = list!(f(|f| f.selector.aggregate_id = Some("a".into())));
    assert_eq!(ids(&by_agg), [a1, a2]);
    let by_agg_type = list!(f(|f| f.selector.aggregate_type = Some("invoice".into())));
    assert_eq!(ids(&by_agg_type), [c1]);
    let old = list!(DeadLetterFilter {
        selector: Selector::default().older_than(hour),
        ..Default::default()
    });
    assert_eq!(ids(&old), [a1, a2, c1]);
    let recent = list!(DeadLetterFilter {
        selector: Selector::default().newer_than(hour),
        ..Default::default()
    });
    assert_eq!(ids(&recent), [b1]);
    let window = list!(DeadLetterFilter {
        selector: Selector::default()
            .older_than(hour * 3 / 2)
            .newer_than(hour * 5 / 2),
        ..Default::default()
    });
    assert_eq!(ids(&window), [a2], "both age bounds apply");
    let limited = list!(DeadLetterFilter {
        limit: 2,
        ..Default::default()
    });
    assert_eq!((ids(&limited), limited.total), (vec![a1, a2], 4));
    let by_id = list!(DeadLetterFilter {
        selector: Selector::ids([c1, b1]),
        ..Default::default()
    });
    assert_eq!(ids(&by_id), [b1, c1]);
    let none = list!(f(|f| f.selector.event_type = Some("nope".into())));
    assert_eq!((none.items.len(), none.total), (0, 0));
}

#[tokio::test]
async fn retry_by_id_aggregate_type_and_all_resets_attempts_and_keeps_seq() {
    let ctx = common::setup().await;
    let p = &ctx.pool;
    let a1 = dead(p, "a", 1, "order.created", "1 hour").await;
    let a2 = dead(p, "a", 2, "order.updated", "1 hour").await;
    let b1 = dead(p, "b", 1, "order.shipped", "1 hour").await;
    let c1 = dead(p, "c", 1, "order.updated", "1 hour").await;
    let d1 = dead(p, "d", 1, "order.created", "1 hour").await;
    let pending = insert(p, ("order", "x", 1), "order.created", None).await;
    sqlx::query("UPDATE outbox_events SET attempts = 2, next_attempt_at = now() + interval '1 hour' WHERE id = $1 OR id = $2")
        .bind(pending)
        .bind(a1)
        .execute(p)
        .await
        .unwrap();
    let seqs_before = snapshot_seqs(p).await;

    let dl = DeadLetters::new(&Schema::default());
    let mut conn = p.acquire().await.unwrap();
    let n = dl
        .retry(&mut conn, &Selector::ids([a1, pending]))
        .await
        .unwrap();
    assert_eq!(n, 1, "only dead letters are retried, never a pending event");
    let row: (i32, Option<String>, bool, bool) = sqlx::query_as(
        "SELECT attempts, last_error, dead_lettered_at IS NULL, next_attempt_at <= now()
         FROM outbox_events WHERE id = $1",
    )
    .bind(a1)
    .fetch_one(p)
    .await
    .unwrap();
    assert_eq!(row, (0, Some("boom a".into()), true, true));
    let untouched: (i32, bool) = sqlx::query_as(
        "SELECT attempts, next_attempt_at IS NOT NULL FROM outbox_events WHERE id = $1",
    )
    .bind(pending)
    .fetch_one(p)
    .await
    .unwrap();
    assert_eq!(untouched, (2, true), "the pending event is untouched");

    let by_agg = Selector::default().aggregate_id("a");
    assert_eq!(dl.retry(&mut conn, &by_agg).await.unwrap(), 1, "a2 only");
    let by_type = Selector::default().event_type("order.shipped");
    assert_eq!(dl.retry(&mut conn, &by_type).await.unwrap(), 1, "b1 only");
    let nothing = Selector::default().event_type("nope");
    assert_eq!(dl.retry(&mut conn, &nothing).await.unwrap(), 0);
    let still_dead: Vec<Uuid> =
        sqlx::query_scalar("SELECT id FROM outbox_dead_letters ORDER BY seq")
            .fetch_all(p)
            .await
            .unwrap();
    assert_eq!(still_dead, [c1, d1]);
    assert_eq!(dl.retry(&mut conn, &Selector::all()).await.unwrap(), 2);
    assert_eq!(
        count(p, "SELECT count(*) FROM outbox_dead_letters").await,
        0
    );
    assert_eq!(
        count(
            p,
            "SELECT count(*) FROM outbox_events WHERE attempts <> 0 AND aggregate_id <> 'x'"
        )
        .await,
        0,
        "every retried event starts again from zero attempts"
    );
    assert_eq!(snapshot_seqs(p).await, seqs_before, "retry keeps every seq");
    let _ = (a2, b1);
}

async fn snapshot_seqs(pool: &PgPool) -> Vec<(Uuid, i64)> {
    common::rows(pool, "SELECT id, seq FROM outbox_events ORDER BY seq").await
}

#[tokio::test]
async fn retried_dead_letters_are_delivered_in_their_original_order() {
    let ctx = common::setup().await;
    let publisher = TestPublisher::new();
    publisher.fail(Match::Aggregate("a".into()), Fail::Reject, None);
    let events: Vec<_> = (1..=5).map(|n| event("a", n)).collect();
    ctx.outbox.enqueue_many(&ctx.pool, &events).await.unwrap();
    ctx.outbox
        .enqueue_many(&ctx.pool, &[event("b", 1)])
        .await
        .unwrap();
    let relay = start_relay(&ctx, &publisher, fast_config("r1")).await;
    wait_for_count(
        &ctx.pool,
        "all of aggregate a to be dead-lettered",
        "SELECT count(*) FROM outbox_dead_letters",
        5,
    )
    .await;
    assert!(publisher.deliveries().iter().all(|e| e.aggregate_id == "b"));

    publisher.heal();
    // Name them newest first: the order comes from seq, not the selector.
    let newest_first: Vec<Uuid> = events.iter().rev().map(|e| e.id).collect();
    let mut conn = ctx.pool.acquire().await.unwrap();
    let n = DeadLetters::new(&Schema::default())
        .retry(&mut conn, &Selector::ids(newest_first))
        .await
        .unwrap();
    assert_eq!(n, 5);
    wait_for_count(&ctx.pool, "the retried events to be delivered", EVENTS, 0).await;
    relay.shutdown().await.unwrap();

    let a: Vec<i64> = publisher
        .deliveries()
        .iter()
        .filter(|e| e.aggregate_id == "a")
        .map(position)
        .collect();
    assert_eq!(a, [1, 2, 3, 4, 5], "delivered in their original seq order");
    let all = publisher.deliveries();
    common::assert_first_deliveries_in_order(&all);
}

#[tokio::test]
async fn a_retried_dead_letter_gets_the_full_attempts_again() {
    let ctx = common::setup().await;
    // Dead-lettered after max_attempts = 3 failures.
    let id = dead(&ctx.pool, "a", 1, "order.updated", "1 minute").await;
    sqlx::query("UPDATE outbox_events SET attempts = 3 WHERE id = $1")
        .bind(id)
        .execute(&ctx.pool)
        .await
        .unwrap();
    let publisher = TestPublisher::new();
    // One more transient failure: were its count kept (3 + 1 >= 3) it
    // would be dead-lettered again; with attempts reset it is retried.
    publisher.fail(Match::Id(id), Fail::Retry, Some(1));
    let mut conn = ctx.pool.acquire().await.unwrap();
    let n = DeadLetters::new(&Schema::default())
        .retry(&mut conn, &Selector::default().aggregate_id("a"))
        .await
        .unwrap();
    assert_eq!(n, 1);
    let config = RelayConfig {
        max_attempts: 3,
        ..fast_config("r1")
    };
    let relay = start_relay(&ctx, &publisher, config).await;
    wait_until("the event to be delivered", LONG, || async {
        publisher.delivered_count() == 1
    })
    .await;
    let stats = relay.shutdown().await.unwrap();
    assert_eq!(stats.dead_lettered, 0);
    assert_eq!(publisher.attempts().len(), 2, "one failure, then delivered");
}

#[tokio::test]
async fn discard_needs_a_selector_and_deletes_only_selected_dead_letters() {
    let ctx = common::setup().await;
    let p = &ctx.pool;
    let a1 = dead(p, "a", 1, "order.created", "3 hours").await;
    let b1 = dead(p, "b", 1, "order.created", "3 hours").await;
    let c1 = dead(p, "c", 1, "order.updated", "1 minute").await;
    let pending = insert(p, ("order", "x", 1), "order.created", None).await;
    let dl = DeadLetters::new(&Schema::default());
    let mut conn = p.acquire().await.unwrap();

    for bad in [Selector::default(), Selector::all().aggregate_id("a")] {
        match dl.discard(&mut conn, &bad).await {
            Err(Error::Invalid { field, reason }) => {
                assert_eq!(field, "selector");
                assert!(reason.contains("all"), "{reason}");
            }
            other => panic!("expected an invalid selector, got {other:?}"),
        }
    }
    assert_eq!(count(p, EVENTS).await, 4);

    let n = dl
        .discard(&mut conn, &Selector::ids([a1, pending]))
        .await
        .unwrap();
    assert_eq!(n, 1, "a pending event is never discarded");
    let old = Selector::all().older_than(Duration::from_secs(3_600));
    assert_eq!(dl.discard(&mut conn, &old).await.unwrap(), 1, "b1 only");
    let left: Vec<Uuid> = sqlx::query_scalar("SELECT id FROM outbox_events ORDER BY seq")
        .fetch_all(p)
        .await
        .unwrap();
    assert_eq!(left, [c1, pending]);
    let _ = b1;
}

#[tokio::test]
async fn count_and_list_are_a_dry_run_that_changes_nothing() {
    let ctx = common::setup().await;
    let p = &ctx.pool;
    for n in 1..=3 {
        dead(p, "a", n, "order.created", "1 hour").await;
    }
    dead(p, "b", 1, "order.updated", "1 hour").await;
    let before = snapshot(p).await;
    let dl = DeadLetters::new(&Schema::default());
    let mut conn = p.acquire().await.unwrap();
    let sel = Selector::default().event_type("order.created");
    assert_eq!(dl.count(&mut conn, &sel).await.unwrap(), 3);
    let preview = dl.list(&mut conn, &sel.to_filter(100)).await.unwrap();
    assert_eq!(preview.total, 3);
    assert!(dl.count(&mut conn, &Selector::default()).await.is_err());
    assert_eq!(snapshot(p).await, before, "nothing changed");
    assert_eq!(dl.retry(&mut conn, &sel).await.unwrap(), 3, "as counted");
    assert_ne!(snapshot(p).await, before);
}

#[tokio::test]
async fn dead_letters_live_in_the_configured_schema() {
    let db = outbox_testkit::postgres::test_db().await;
    let pool = db.pool().await;
    let billing = Schema::new("billing").unwrap();
    let mut conn = pool.acquire().await.unwrap();
    outbox::migrate(&mut conn, &billing, &Default::default())
        .await
        .unwrap();
    sqlx::query(
        "INSERT INTO billing.outbox_events
             (aggregate_type, aggregate_id, event_type, payload, dead_lettered_at)
         VALUES ('invoice', '7', 'invoice.sent', '{}', now())",
    )
    .execute(&mut *conn)
    .await
    .unwrap();
    let dl = DeadLetters::new(&billing);
    let page = dl
        .list(&mut conn, &DeadLetterFilter::default())
        .await
        .unwrap();
    assert_eq!(page.total, 1);
    assert_eq!(dl.discard(&mut conn, &Selector::all()).await.unwrap(), 1);
    // The public schema has no outbox here: it is never looked at.
    let n: i64 = sqlx::query_scalar("SELECT count(*) FROM billing.outbox_events")
        .fetch_one(&mut *conn)
        .await
        .unwrap();
    assert_eq!(n, 0);
}
