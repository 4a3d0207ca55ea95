//! `outbox console` over HTTP against hostile and careless requests: input
//! PostgreSQL cannot store, bulk actions whose selection grows after the
//! confirmation, anonymous visits, guessing, and methods a route does not
//! take. Each answer must be the one a careful operator expects: a 4xx
//! naming the field or the method, never a 500 or a changed database.

mod common;
mod console_support;

use console_support::{client, count, csrf, get, insert, post, start};
use outbox_testkit::postgres::migrated_test_db;

/// Every filter of the events and dead-letter pages, and the forms that
/// act, with a NUL byte in one field: a 400 naming that field, the
/// database never asked, nothing changed.
#[tokio::test]
async fn a_nul_byte_in_any_filter_or_form_is_a_400_naming_the_field() {
    let (db, pool) = migrated_test_db().await;
    insert(&pool, "dead-1", 1, true).await;
    let console = start(&db.url, &[], &[]);
    let c = client();
    let (_, page) = get(&c, &console, "/").await;
    let token = csrf(&page);

    for (page, field) in [
        ("/events", "aggregate_type"),
        ("/events", "aggregate_id"),
        ("/events", "event_type"),
        ("/dead-letters", "aggregate_type"),
        ("/dead-letters", "aggregate_id"),
        ("/dead-letters", "event_type"),
        ("/dead-letters", "error"),
    ] {
        let path = format!("{page}?{field}=a%00b");
        let (status, body) = get(&c, &console, &path).await;
        assert_eq!(status, 400, "{path}: {body}");
        assert!(
            body.contains(&format!("Cannot read <code>{field}</code>")) && body.contains("NUL"),
            "{path}: {body}"
        );
        assert!(!body.contains("invalid byte sequence"), "{path}: {body}");
    }

    let forms: [(&str, &[(&str, &str)]); 4] = [
        ("/pause", &[("scope", "type"), ("aggregate_type", "a\0b")]),
        ("/resume", &[("scope", "type"), ("aggregate_type", "a\0b")]),
        (
            "/dead-letters/confirm",
            &[
                ("action", "discard"),
                ("scope", "matching"),
                ("aggregate_id", "dead\0-1"),
            ],
        ),
        (
            "/dead-letters/apply",
            &[
                ("action", "discard"),
                ("scope", "matching"),
                ("error", "broker\0"),
            ],
        ),
    ];
    for (path, pairs) in forms {
        let mut pairs = pairs.to_vec();
        pairs.push(("csrf", &token));
        let (status, _, body) = post(&c, &console, path, &pairs).await;
        assert_eq!(status, 400, "{path}: {body}");
        assert!(
            body.contains("Cannot read <code>") && body.contains("NUL"),
            "{path}: {body}"
        );
        assert!(!body.contains("invalid byte sequence"), "{path}: {body}");
    }
    assert_eq!(count(&pool, "SELECT count(*) FROM outbox_pauses").await, 0);
    assert_eq!(
        count(&pool, "SELECT count(*) FROM outbox_dead_letters").await,
        1
    );
    assert!(
        console.log().iter().all(|l| !l.contains("invalid byte")),
        "{:?}",
        console.log()
    );
}
