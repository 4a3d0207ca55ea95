// Why this file is long: one test per guarantee of the console, sharing one program launch helper; splitting them would start more test binaries.
//! `outbox console` over HTTP against a real PostgreSQL: every page, the
//! escaping of hostile rows, sessions, CSRF and passwords, the dead-letter
//! actions (the CLI's semantics, order kept on retry), pause / resume, and
//! keyset pages that see every dead letter once.

mod common;
mod console_support;

use console_support::{client, count, csrf, get, insert, post, selection, start, ticked_ids};
use outbox_testkit::postgres::migrated_test_db;

const HOSTILE_ID: &str = "<script>alert(1)</script>";
const HOSTILE_ERROR: &str = r#""><img src=x onerror=alert(2)>"#;

#[tokio::test]
async fn every_page_renders_and_hostile_rows_show_as_text() {
    let (db, pool) = migrated_test_db().await;
    let id: uuid::Uuid = sqlx::query_scalar(
        "INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload, headers,
                                    attempts, last_error, next_attempt_at)
         VALUES ('order', $1, 'javascript:alert(3)', '{\"big\": 1e400, \"s\": \"</pre><script>x()</script>\"}',
                 '{\"traceparent\": \"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01\"}',
                 2, $2, now() + interval '1 hour')
         RETURNING id",
    )
    .bind(HOSTILE_ID)
    .bind(HOSTILE_ERROR)
    .fetch_one(&pool)
    .await
    .unwrap();
    insert(&pool, HOSTILE_ID, 2, false).await;
    insert(&pool, "dead-1", 1, true).await;
    let console = start(
        &db.url,
        &["--trace-link", "https://traces.example/t/{trace_id}"],
        &[],
    );
    let c = client();

    let pages = [
        "/".to_owned(),
        "/stuck".to_owned(),
        "/events?aggregate_type=order".to_owned(),
        format!("/events/{id}"),
        "/dead-letters".to_owned(),
    ];
    for path in &pages {
        let r = c.get(console.url(path)).send().await.unwrap();
        assert_eq!(r.status(), 200, "{path}");
        let csp = r.headers()["content-security-policy"]
            .to_str()
            .unwrap()
            .to_owned();
        assert!(
            csp.contains("script-src 'self'") && !csp.contains("unsafe-inline"),
            "{csp}"
        );
        let body = r.text().await.unwrap();
        assert!(
            !body.contains("<script>alert(1)") && !body.contains("<img src=x"),
            "{path}: unescaped"
        );
        assert!(!body.contains("<script>x()"), "{path}: payload unescaped");
        assert!(
            !body.contains("href=\"javascript:"),
            "{path}: javascript: link"
        );
    }
    let (_, stuck) = get(&c, &console, "/stuck").await;
    assert!(
        stuck.contains("&lt;script&gt;alert(1)&lt;/script&gt;"),
        "{stuck}"
    );
    assert!(stuck.contains("&quot;&gt;&lt;img src=x onerror=alert(2)&gt;"));
    assert!(
        stuck.contains("<td>1</td>"),
        "one event waits behind the head: {stuck}"
    );
    let (_, detail) = get(&c, &console, &format!("/events/{id}")).await;
    // jsonb keeps 1e400 as the exact numeric PostgreSQL prints (1 and 400
    // zeros); the page shows that text, never a float's rounding of it.
    let stored: String =
        sqlx::query_scalar("SELECT payload->>'big' FROM outbox_events WHERE id = $1")
            .bind(id)
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(stored, format!("1{}", "0".repeat(400)));
    assert!(
        detail.contains(&format!("&quot;big&quot;: {stored}\n")),
        "numbers altered: {detail}"
    );
    assert!(detail.contains("https://traces.example/t/0af7651916cd43dd8448eb211c80319c"));
    let (_, history) = get(
        &c,
        &console,
        "/events?aggregate_type=order&aggregate_id=%3Cscript%3Ealert%281%29%3C%2Fscript%3E",
    )
    .await;
    assert_eq!(
        history.matches("<tr>").count(),
        3,
        "header and two events: {history}"
    );
    let (_, overview) = get(&c, &console, "/").await;
    assert!(
        overview.contains(r#"data-figure="dead_letters">1<"#),
        "{overview}"
    );
    let (status, json) = get(&c, &console, "/overview.json").await;
    assert_eq!(status, 200);
    let figures: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(figures["pending"], "2");
    assert_eq!(figures["retrying"], "1");
    let (status, page) = get(&c, &console, "/events?from=yesterday").await;
    assert_eq!(status, 400);
    assert!(page.contains("Cannot read <code>from</code>"), "{page}");
    let (status, _) = get(&c, &console, &format!("/events/{}", uuid::Uuid::new_v4())).await;
    assert_eq!(status, 404);
}

#[tokio::test]
async fn posts_without_the_sessions_token_or_from_another_site_are_refused() {
    let (db, pool) = migrated_test_db().await;
    let console = start(&db.url, &[], &[]);
    let c = client();
    let (_, page) = get(&c, &console, "/").await;
    let token = csrf(&page);
    let pause = |t: &'static str| [("scope", "all"), ("csrf", t)];
    let pauses = "SELECT count(*) FROM outbox_pauses";

    // No token, a wrong token, no session at all.
    assert_eq!(
        post(&c, &console, "/pause", &[("scope", "all")]).await.0,
        403
    );
    assert_eq!(post(&c, &console, "/pause", &pause("0000")).await.0, 403);
    let stranger = client();
    let (status, _, _) = post(
        &stranger,
        &console,
        "/pause",
        &[("scope", "all"), ("csrf", &token)],
    )
    .await;
    assert_eq!(status, 403);
    // The right token, sent from another site.
    let r = c
        .post(console.url("/pause"))
        .header("origin", "http://evil.example")
        .form(&[("scope", "all"), ("csrf", token.as_str())])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    assert_eq!(
        count(&pool, pauses).await,
        0,
        "a refused POST changed something"
    );

    let (status, location, _) = post(
        &c,
        &console,
        "/pause",
        &[("scope", "all"), ("csrf", &token)],
    )
    .await;
    assert_eq!((status, location.as_deref()), (303, Some("/")));
    assert_eq!(
        count(
            &pool,
            "SELECT count(*) FROM outbox_pauses WHERE aggregate_type IS NULL"
        )
        .await,
        1
    );
    let (_, page) = get(&c, &console, "/").await;
    assert!(page.contains("Delivery paused for everything."), "{page}");
    assert!(page.contains(r#"data-figure="paused">everything<"#));
    // A form that does not say what to pause is refused, naming the field.
    let (status, _, body) = post(
        &c,
        &console,
        "/pause",
        &[("scope", "type"), ("csrf", &token)],
    )
    .await;
    assert_eq!(status, 400);
    assert!(body.contains("aggregate_type"), "{body}");
    let (status, _, _) = post(
        &c,
        &console,
        "/resume",
        &[("scope", "all"), ("csrf", &token)],
    )
    .await;
    assert_eq!(status, 303);
    assert_eq!(count(&pool, pauses).await, 0);
}

#[tokio::test]
async fn a_password_is_required_off_loopback_and_a_wrong_one_is_refused() {
    let (db, _pool) = migrated_test_db().await;
    let out = common::bin()
        .env("DATABASE_URL", &db.url)
        .env_remove("OUTBOX_CONSOLE_PASSWORD")
        .args(["console", "--listen", "0.0.0.0:0"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(common::text(&out.stderr).contains("OUTBOX_CONSOLE_PASSWORD"));

    let console = start(
        &db.url,
        &[],
        &[("OUTBOX_CONSOLE_PASSWORD", "correct horse")],
    );
    let c = client();
    let r = c.get(console.url("/dead-letters")).send().await.unwrap();
    assert_eq!(
        (
            r.status().as_u16(),
            r.headers()["location"].to_str().unwrap()
        ),
        (303, "/login")
    );
    assert_eq!(get(&c, &console, "/overview.json").await.0, 303);
    assert_eq!(
        post(&c, &console, "/pause", &[("scope", "all")]).await.0,
        403
    );
    let (status, _, body) = post(&c, &console, "/login", &[("password", "wrong")]).await;
    assert_eq!(status, 401);
    assert!(body.contains("Wrong password."));
    assert_eq!(
        get(&c, &console, "/").await.0,
        303,
        "a wrong password opened a session"
    );

    let (status, location, _) =
        post(&c, &console, "/login", &[("password", "correct horse")]).await;
    assert_eq!((status, location.as_deref()), (303, Some("/")));
    let (status, page) = get(&c, &console, "/").await;
    assert_eq!(status, 200);
    let (status, _, _) = post(&c, &console, "/logout", &[("csrf", &csrf(&page))]).await;
    assert_eq!(status, 303);
    assert_eq!(
        get(&c, &console, "/").await.0,
        303,
        "signed out, still let in"
    );
}

#[tokio::test]
async fn read_only_shows_no_action_and_refuses_every_post() {
    let (db, pool) = migrated_test_db().await;
    insert(&pool, "a", 1, true).await;
    let console = start(&db.url, &["--read-only"], &[]);
    let c = client();
    let (_, overview) = get(&c, &console, "/").await;
    let (_, dead) = get(&c, &console, "/dead-letters").await;
    assert!(!overview.contains("action=\"/pause\""), "{overview}");
    assert!(
        !dead.contains("Retry…") && !dead.contains("type=\"checkbox\""),
        "{dead}"
    );
    let token = csrf(&overview);
    let (status, _, _) = post(
        &c,
        &console,
        "/dead-letters/apply",
        &[
            ("action", "discard"),
            ("scope", "matching"),
            ("csrf", &token),
        ],
    )
    .await;
    assert_eq!(status, 403);
    assert_eq!(count(&pool, "SELECT count(*) FROM outbox_events").await, 1);
}

#[tokio::test]
async fn retry_and_discard_say_how_many_first_and_retried_ones_are_delivered_in_order() {
    let (db, pool) = migrated_test_db().await;
    // Aggregate "a": three dead letters then a pending event; "b": two.
    for n in 1..=3 {
        insert(&pool, "a", n, true).await;
    }
    insert(&pool, "a", 4, false).await;
    let b1 = insert(&pool, "b", 1, true).await;
    let b2 = insert(&pool, "b", 2, true).await;
    let console = start(&db.url, &[], &[]);
    let c = client();
    let (_, page) = get(&c, &console, "/dead-letters?aggregate_id=a").await;
    let token = csrf(&page);
    assert_eq!(ticked_ids(&page).len(), 3);

    let retry_a = [
        ("action", "retry"),
        ("scope", "matching"),
        ("aggregate_id", "a"),
        ("csrf", token.as_str()),
    ];
    let (status, _, confirm) = post(&c, &console, "/dead-letters/confirm", &retry_a).await;
    assert_eq!(status, 200);
    assert!(
        confirm.contains(r#"<strong id="confirm-count">3</strong> dead letters"#),
        "{confirm}"
    );
    assert_eq!(
        count(&pool, "SELECT count(*) FROM outbox_dead_letters").await,
        5,
        "confirm changed rows"
    );
    let shown = selection(&confirm).unwrap();
    let mut confirmed = retry_a.to_vec();
    confirmed.push(("selection", &shown));
    let (status, location, _) = post(&c, &console, "/dead-letters/apply", &confirmed).await;
    assert_eq!((status, location.as_deref()), (303, Some("/dead-letters")));
    let (_, after) = get(&c, &console, "/dead-letters").await;
    assert!(
        after.contains("Retried 3 dead letters (<bdi>aggregate id a</bdi>)."),
        "{after}"
    );
    assert_eq!(ticked_ids(&after), vec![b1, b2]);
    outbox_testkit::wait_until(
        "the action to be logged",
        std::time::Duration::from_secs(10),
        || async {
            console.log().iter().any(|l| {
                l.contains("console dead-letter action")
                    && l.contains("retry")
                    && l.contains("count=3")
            })
        },
    )
    .await;

    // Discard one ticked dead letter of "b".
    let discard = [
        ("action", "discard"),
        ("scope", "selected"),
        ("id", &b1.to_string()),
        ("csrf", token.as_str()),
    ];
    let (_, _, confirm) = post(&c, &console, "/dead-letters/confirm", &discard).await;
    assert!(
        confirm.contains(r#"<strong id="confirm-count">1</strong> dead letter "#),
        "{confirm}"
    );
    let shown = selection(&confirm).unwrap();
    let mut confirmed = discard.to_vec();
    confirmed.push(("selection", &shown));
    post(&c, &console, "/dead-letters/apply", &confirmed).await;
    let left: Vec<uuid::Uuid> = sqlx::query_scalar("SELECT id FROM outbox_dead_letters")
        .fetch_all(&pool)
        .await
        .unwrap();
    assert_eq!(left, vec![b2]);
    // Nothing ticked: refused with the field named, nothing changed.
    let (status, _, body) = post(
        &c,
        &console,
        "/dead-letters/confirm",
        &[
            ("action", "discard"),
            ("scope", "selected"),
            ("csrf", &token),
        ],
    )
    .await;
    assert_eq!(status, 400);
    assert!(body.contains("tick at least one"), "{body}");

    // The retried events go out in their original order, before "a"'s
    // pending one.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("events.jsonl");
    common::drain_to_file(&db.url, &file, &[]);
    let a: Vec<i64> = common::read_deliveries(&file)
        .into_iter()
        .filter(|(_, agg, _)| agg == "a")
        .map(|(_, _, n)| n)
        .collect();
    assert_eq!(a, vec![1, 2, 3, 4]);
}

#[tokio::test]
async fn keyset_pages_walk_ten_thousand_dead_letters_seeing_each_once() {
    let (db, pool) = migrated_test_db().await;
    sqlx::query(
        "INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload, attempts,
                                    last_error, dead_lettered_at)
         SELECT 'order', 'agg-' || (g % 97), 'order.updated', jsonb_build_object('n', g), 10,
                'no', now() - interval '1 hour'
         FROM generate_series(1, 10000) g",
    )
    .execute(&pool)
    .await
    .unwrap();
    let console = start(&db.url, &[], &[]);
    let c = client();
    let mut seen = std::collections::HashSet::new();
    let mut path = "/dead-letters".to_owned();
    let mut pages = 0;
    loop {
        let (status, page) = get(&c, &console, &path).await;
        assert_eq!(status, 200);
        pages += 1;
        for id in ticked_ids(&page) {
            assert!(seen.insert(id), "{id} shown twice");
        }
        let Some(i) = page.find(r#"class="next" href=""#) else {
            break;
        };
        let rest = &page[i + 19..];
        path = rest[..rest.find('"').unwrap()].replace("&amp;", "&");
    }
    assert_eq!(seen.len(), 10_000);
    assert_eq!(pages, 200);
}

/// `outbox_paused` of the relay's one source (its schema, `public`) from
/// its /metrics, once it answers.
async fn paused_metric(port: u16) -> Option<f64> {
    let (_, body) = common::http_get(port, "/metrics").await?;
    body.lines()
        .find_map(|l| l.strip_prefix("outbox_paused{source=\"public\"} "))
        .and_then(|v| v.trim().parse().ok())
}

#[tokio::test]
async fn a_pause_from_the_console_holds_a_running_relay_and_shows_in_its_metrics() {
    let (db, pool) = migrated_test_db().await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("events.jsonl");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let addr = format!("127.0.0.1:{port}");
    let mut relay = common::spawn_relay(&db.url, &file, "r1", &["--http-addr", &addr]);
    let console = start(&db.url, &[], &[]);
    let c = client();
    let (_, page) = get(&c, &console, "/").await;
    let token = csrf(&page);
    let (status, _, _) = post(
        &c,
        &console,
        "/pause",
        &[
            ("scope", "type"),
            ("aggregate_type", "order"),
            ("csrf", &token),
        ],
    )
    .await;
    assert_eq!(status, 303);
    let wait = std::time::Duration::from_secs(60);
    outbox_testkit::wait_until("outbox_paused to read 1", wait, || async {
        paused_metric(port).await == Some(1.0)
    })
    .await;

    for n in 1..=5 {
        insert(&pool, "held", n, false).await;
    }
    // An observation window, not a synchronisation: the relay polls every
    // 50 ms, so it has looked a dozen times by its end.
    tokio::time::sleep(std::time::Duration::from_millis(800)).await;
    assert!(
        common::read_deliveries(&file).is_empty(),
        "delivered while paused"
    );
    let (_, overview) = get(&c, &console, "/").await;
    assert!(
        overview.contains("aggregate type <bdi><code>order</code></bdi>"),
        "{overview}"
    );

    let (status, _, _) = post(
        &c,
        &console,
        "/resume",
        &[
            ("scope", "type"),
            ("aggregate_type", "order"),
            ("csrf", &token),
        ],
    )
    .await;
    assert_eq!(status, 303);
    outbox_testkit::wait_until("the held events to be delivered", wait, || async {
        common::read_deliveries(&file).len() == 5
    })
    .await;
    let order: Vec<i64> = common::read_deliveries(&file)
        .into_iter()
        .map(|(_, _, n)| n)
        .collect();
    assert_eq!(order, vec![1, 2, 3, 4, 5]);
    outbox_testkit::wait_until("outbox_paused to read 0", wait, || async {
        paused_metric(port).await == Some(0.0)
    })
    .await;
    let _ = relay.kill();
    let _ = relay.wait();
}

#[tokio::test]
async fn dead_letters_filter_by_error_text_and_all_matching_acts_on_exactly_those() {
    let (db, pool) = migrated_test_db().await;
    for (n, error) in [
        (1, "Timeout talking to the broker"),
        (2, "schema rejected: 100%_ full"),
        (3, "timeout again"),
        (4, "schema rejected: 1000 full"),
    ] {
        let id = insert(&pool, &format!("e-{n}"), n, true).await;
        sqlx::query("UPDATE outbox_events SET last_error = $2 WHERE id = $1")
            .bind(id)
            .bind(error)
            .execute(&pool)
            .await
            .unwrap();
    }
    let console = start(&db.url, &[], &[]);
    let c = client();
    let (_, page) = get(&c, &console, "/dead-letters?error=TIMEOUT").await;
    assert_eq!(ticked_ids(&page).len(), 2, "case-insensitive: {page}");
    // % and _ are plain characters, not patterns.
    let (_, page) = get(&c, &console, "/dead-letters?error=100%25_").await;
    assert_eq!(ticked_ids(&page).len(), 1, "{page}");
    let token = csrf(&page);

    let discard = |error: &'static str| {
        [
            ("action", "discard"),
            ("scope", "matching"),
            ("error", error),
        ]
    };
    let form = |error| {
        let mut f: Vec<(&str, &str)> = discard(error).to_vec();
        f.push(("csrf", token.as_str()));
        f
    };
    let (_, _, confirm) = post(&c, &console, "/dead-letters/confirm", &form("timeout")).await;
    assert!(
        confirm.contains(r#"<strong id="confirm-count">2</strong> dead letters"#),
        "{confirm}"
    );
    assert!(confirm.contains("last error containing"), "{confirm}");
    let shown = selection(&confirm).unwrap();
    let mut confirmed = form("timeout");
    confirmed.push(("selection", &shown));
    post(&c, &console, "/dead-letters/apply", &confirmed).await;
    let left: Vec<String> = sqlx::query_scalar("SELECT last_error FROM outbox_dead_letters")
        .fetch_all(&pool)
        .await
        .unwrap();
    assert_eq!(
        left,
        ["schema rejected: 100%_ full", "schema rejected: 1000 full"]
    );
    let (status, _, confirm) = post(
        &c,
        &console,
        "/dead-letters/confirm",
        &form("no such error"),
    )
    .await;
    assert_eq!(status, 200);
    assert!(confirm.contains("Nothing to discard"), "{confirm}");
    // Nothing to confirm, so no selection: an action without one is refused.
    let (status, _, body) = post(&c, &console, "/dead-letters/apply", &form("no such error")).await;
    assert_eq!(status, 400);
    assert!(
        body.contains("Cannot read <code>selection</code>"),
        "{body}"
    );
    assert_eq!(
        count(&pool, "SELECT count(*) FROM outbox_dead_letters").await,
        2
    );
}

/// JSON text without the whitespace outside its strings.
fn squeeze(json: &str) -> String {
    let (mut out, mut in_string, mut escaped) = (String::new(), false, false);
    for c in json.chars() {
        if in_string {
            out.push(c);
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == '"' {
                in_string = false;
            }
        } else if c == '"' {
            in_string = true;
            out.push(c);
        } else if !c.is_whitespace() {
            out.push(c);
        }
    }
    out
}

/// The text of `<pre … id="ID">…</pre>` on a page, unescaped.
fn pre_text(page: &str, id: &str) -> String {
    let start = page.find(&format!(r#"id="{id}">"#)).unwrap() + id.len() + 6;
    let end = start + page[start..].find("</pre>").unwrap();
    page[start..end]
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&#39;", "'")
        .replace("&amp;", "&")
}

#[tokio::test]
async fn every_hostile_payload_and_header_set_is_shown_as_stored() {
    use outbox_testkit::conformance::{HOSTILE_HEADERS, HOSTILE_PAYLOADS};
    let (db, pool) = migrated_test_db().await;
    let mut rows = Vec::new();
    let headers = HOSTILE_HEADERS
        .iter()
        .map(|(name, h)| (*name, "'{}'::jsonb", *h));
    let payloads = HOSTILE_PAYLOADS
        .iter()
        .map(|(name, p)| (*name, *p, "'{}'::jsonb"));
    for (name, payload, headers) in payloads.chain(headers) {
        let sql = format!(
            "INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload, headers)
             VALUES ('hostile', $1, 'x', {payload}, {headers})
             RETURNING id, payload::text, headers::text"
        );
        let (id, p, h): (uuid::Uuid, String, String) = sqlx::query_as(&sql)
            .bind(name)
            .fetch_one(&pool)
            .await
            .unwrap();
        rows.push((name, id, p, h));
    }
    let console = start(&db.url, &[], &[]);
    let c = client();
    for (name, id, payload, headers) in rows {
        let (status, page) = get(&c, &console, &format!("/events/{id}")).await;
        assert_eq!(status, 200, "{name}");
        assert_eq!(
            squeeze(&pre_text(&page, "payload")),
            squeeze(&payload),
            "{name}: payload"
        );
        assert_eq!(
            squeeze(&pre_text(&page, "headers")),
            squeeze(&headers),
            "{name}: headers"
        );
    }
}

#[tokio::test]
async fn the_database_password_shows_on_no_page_and_in_no_log_line() {
    let (db, pool) = migrated_test_db().await;
    // The test cluster trusts everyone: any password connects.
    let marker = "Pw-Console-Marker-7319";
    let (scheme, rest) = db.url.split_once("://").unwrap();
    let url = match rest.split_once('@') {
        Some((user, host)) => format!(
            "{scheme}://{}:{marker}@{host}",
            user.split(':').next().unwrap()
        ),
        None => format!("{scheme}://postgres:{marker}@{rest}"),
    };
    let console = start(&url, &[], &[]);
    let c = client();
    let (status, page) = get(&c, &console, "/").await;
    assert_eq!(status, 200, "{page}");
    // A failing read shows its error, redacted.
    sqlx::query("DROP TABLE outbox_pauses")
        .execute(&pool)
        .await
        .unwrap();
    let (status, page) = get(&c, &console, "/").await;
    assert_eq!(status, 500);
    assert!(page.contains("outbox_pauses"), "the error is shown: {page}");
    for path in [
        "/",
        "/overview.json",
        "/stuck",
        "/dead-letters",
        "/events?state=dead",
    ] {
        let (_, page) = get(&c, &console, path).await;
        assert!(!page.contains(marker), "{path}: {page}");
    }
    assert!(
        console.log().iter().all(|l| !l.contains(marker)),
        "{:?}",
        console.log()
    );
}

/// The pause a switch back to the table mode holds is the relay's to lift,
/// once it has read the slot to the switch: the console's *Resume* leaves
/// it, and says why (rows lifted early could overtake the events still in
/// the slot).
#[tokio::test]
async fn resume_leaves_the_pause_of_a_switch_back_to_the_table_mode_and_says_why() {
    let (db, pool) = migrated_test_db().await;
    sqlx::query(
        "INSERT INTO outbox_pauses (aggregate_type, paused_by)
         VALUES (NULL, 'outbox migrate --mode table: until the relay has read the slot to the switch')",
    )
    .execute(&pool)
    .await
    .unwrap();
    let console = start(&db.url, &[], &[]);
    let c = client();
    let (_, page) = get(&c, &console, "/").await;
    let token = csrf(&page);
    let (status, _, _) = post(
        &c,
        &console,
        "/resume",
        &[("scope", "all"), ("csrf", &token)],
    )
    .await;
    assert_eq!(status, 303);
    assert_eq!(
        count(&pool, "SELECT count(*) FROM outbox_pauses").await,
        1,
        "the switch's pause stays"
    );
    let (_, page) = get(&c, &console, "/").await;
    assert!(
        page.contains(
            "Delivery stays paused for everything: the schema is switching back to the table mode"
        ),
        "{page}"
    );
}
