//! `outbox console` over HTTP against hostile and careless requests: input
//! PostgreSQL cannot store, bulk actions whose selection grows after the
//! confirmation, anonymous visits, guessing passwords in parallel, idle
//! connections, and methods a route does not take. Each answer must be the one a careful operator expects: a 4xx
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

/// The hidden `name` value of the confirmation's form.
fn hidden(page: &str, name: &str) -> String {
    let mark = format!(r#"type="hidden" name="{name}" value=""#);
    let start = page
        .find(&mark)
        .unwrap_or_else(|| panic!("no {name} in {page}"))
        + mark.len();
    page[start..start + page[start..].find('"').unwrap()].to_owned()
}

/// Dead letters of aggregate type `race`, dead-lettered `ago` ago.
async fn race_dead_letters(pool: &sqlx::PgPool, n: i64, ago: &str) {
    sqlx::query(
        "INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload, attempts,
                                    last_error, dead_lettered_at)
         SELECT 'race', 'r-' || g, 'order.updated', '{}', 10, 'broker said no',
                now() - $2::interval
         FROM generate_series(1, $1) AS g",
    )
    .bind(n)
    .bind(ago)
    .execute(pool)
    .await
    .unwrap();
}

/// "Discard 3 dead letters (aggregate type race)?" deleted 503 when 500
/// more matched before the button was pressed. The confirmation carries
/// the selection it showed; an action on another selection is refused
/// with the new count, nothing changed, and confirming again acts.
#[tokio::test]
async fn a_bulk_action_acts_on_what_was_confirmed_or_is_refused() {
    let (db, pool) = migrated_test_db().await;
    race_dead_letters(&pool, 3, "2 hours").await;
    let console = start(&db.url, &[], &[]);
    let c = client();
    let (_, page) = get(&c, &console, "/dead-letters?aggregate_type=race").await;
    let token = csrf(&page);
    let form = [
        ("action", "discard"),
        ("scope", "matching"),
        ("aggregate_type", "race"),
        ("csrf", token.as_str()),
    ];
    let (status, _, confirm) = post(&c, &console, "/dead-letters/confirm", &form).await;
    assert_eq!(status, 200);
    assert!(
        confirm.contains(r#"<strong id="confirm-count">3</strong> dead letters"#),
        "{confirm}"
    );
    let selection = hidden(&confirm, "selection");
    race_dead_letters(&pool, 500, "2 hours").await;

    let mut confirmed = form.to_vec();
    confirmed.push(("selection", &selection));
    let (status, _, refused) = post(&c, &console, "/dead-letters/apply", &confirmed).await;
    assert_eq!(status, 409, "{refused}");
    assert!(
        refused.contains("Nothing was discarded") && refused.contains("3 confirmed, 503 now"),
        "{refused}"
    );
    let dead = "SELECT count(*) FROM outbox_dead_letters";
    assert_eq!(count(&pool, dead).await, 503, "nothing deleted");

    // The refusal is the new confirmation: pressing it acts on the 503.
    assert!(
        refused.contains(r#"<strong id="confirm-count">503</strong> dead letters"#),
        "{refused}"
    );
    let again = hidden(&refused, "selection");
    let mut confirmed = form.to_vec();
    confirmed.push(("selection", &again));
    let (status, location, _) = post(&c, &console, "/dead-letters/apply", &confirmed).await;
    assert_eq!((status, location.as_deref()), (303, Some("/dead-letters")));
    assert_eq!(count(&pool, dead).await, 0);

    // With an age bound the selection grows as time passes: 2 confirmed,
    // then a third dead letter becomes old enough.
    race_dead_letters(&pool, 2, "2 hours").await;
    race_dead_letters(&pool, 3, "50 minutes").await;
    let aged = [
        ("action", "retry"),
        ("scope", "matching"),
        ("aggregate_type", "race"),
        ("older_than", "1h"),
        ("csrf", token.as_str()),
    ];
    let (_, _, confirm) = post(&c, &console, "/dead-letters/confirm", &aged).await;
    assert!(
        confirm.contains(r#"<strong id="confirm-count">2</strong> dead letters"#),
        "{confirm}"
    );
    let selection = hidden(&confirm, "selection");
    sqlx::query(
        "UPDATE outbox_events SET dead_lettered_at = now() - interval '61 minutes'
         WHERE id = (SELECT id FROM outbox_dead_letters
                     WHERE dead_lettered_at > now() - interval '1 hour' LIMIT 1)",
    )
    .execute(&pool)
    .await
    .unwrap();
    let mut confirmed = aged.to_vec();
    confirmed.push(("selection", &selection));
    let (status, _, refused) = post(&c, &console, "/dead-letters/apply", &confirmed).await;
    assert_eq!(status, 409, "{refused}");
    assert!(refused.contains("2 confirmed, 3 now"), "{refused}");
    assert_eq!(count(&pool, dead).await, 5, "nothing retried");
}

/// Without a password, every cookie-less GET opened a session, and 1,100
/// of them (which a page elsewhere can make a browser send) evicted the
/// operator's: the next action was refused with "sign in first" on a
/// console that has no sign-in. The operator's session, once its cookie
/// came back, outlives any number of them.
#[tokio::test]
async fn cookie_less_visits_do_not_end_the_operators_session() {
    let (db, pool) = migrated_test_db().await;
    let console = start(&db.url, &[], &[]);
    let operator = client();
    let (_, page) = get(&operator, &console, "/").await;
    let token = csrf(&page);
    // The overview's refresh, with the session's cookie.
    let (status, _) = get(&operator, &console, "/overview.json").await;
    assert_eq!(status, 200);

    let stranger = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let url = console.url("/healthz-nope");
    let visits = (0..8).map(|_| {
        let (stranger, url) = (stranger.clone(), url.clone());
        tokio::spawn(async move {
            for _ in 0..150 {
                let r = stranger.get(&url).send().await.unwrap();
                assert!(r.headers().contains_key("set-cookie"));
            }
        })
    });
    for visit in futures::future::join_all(visits).await {
        visit.unwrap();
    }

    let (status, location, body) = post(
        &operator,
        &console,
        "/pause",
        &[("scope", "all"), ("csrf", &token)],
    )
    .await;
    assert_eq!((status, location.as_deref()), (303, Some("/")), "{body}");
    assert_eq!(count(&pool, "SELECT count(*) FROM outbox_pauses").await, 1);

    // A POST without a session is refused without mentioning a sign-in the
    // console does not have.
    let (status, _, body) = post(&client(), &console, "/resume", &[("scope", "all")]).await;
    assert_eq!(status, 403);
    assert!(
        !body.to_lowercase().contains("sign in") && body.contains("reload the page"),
        "{body}"
    );
    assert_eq!(count(&pool, "SELECT count(*) FROM outbox_pauses").await, 1);
}

/// 128 idle connections answered one probe in four and 200 none: the
/// console kept 64 connections and gave each 10 s to send a request head,
/// so the rest waited in the listen queue. It now serves through the
/// relay's accept loop, whose limits held 300: with 300 connections that
/// send nothing (each reopened as soon as the console closes it), every
/// probe of `/login` and `/metrics` is answered, within a bound generous
/// enough never to flake.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_hundred_idle_connections_do_not_lock_the_console_out() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::time::{Duration, Instant};
    use tokio::io::AsyncReadExt;

    const IDLE: usize = 300;
    let (db, _pool) = migrated_test_db().await;
    let console = start(&db.url, &[], &[("OUTBOX_CONSOLE_PASSWORD", "s3cret")]);
    let addr = console.base.trim_start_matches("http://").to_owned();
    let opened = Arc::new(AtomicUsize::new(0));
    let (stop, _) = tokio::sync::watch::channel(false);
    for _ in 0..IDLE {
        let (addr, opened, mut stop) = (addr.clone(), opened.clone(), stop.subscribe());
        tokio::spawn(async move {
            while !*stop.borrow() {
                if let Ok(mut s) = tokio::net::TcpStream::connect(&addr).await {
                    opened.fetch_add(1, Ordering::Relaxed);
                    let mut buf = [0u8; 64];
                    tokio::select! {
                        _ = s.read(&mut buf) => {}
                        _ = stop.changed() => return,
                    }
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        });
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while opened.load(Ordering::Relaxed) < IDLE && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        opened.load(Ordering::Relaxed) >= IDLE,
        "idle connections not opened"
    );

    let mut failures = Vec::new();
    let mut slowest = Duration::ZERO;
    for i in 0..10 {
        let path = if i % 2 == 0 { "/login" } else { "/metrics" };
        // A fresh connection per probe, as a monitor opens one.
        let probe = reqwest::Client::builder()
            .pool_max_idle_per_host(0)
            .timeout(Duration::from_secs(5))
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .unwrap();
        let t = Instant::now();
        match probe.get(console.url(path)).send().await {
            Ok(r) if r.status() == 200 => slowest = slowest.max(t.elapsed()),
            Ok(r) => failures.push(format!("{path}: {}", r.status())),
            Err(e) => failures.push(format!("{path} after {:?}: {e}", t.elapsed())),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let _ = stop.send(true);
    eprintln!(
        "{IDLE} idle connections: {} of 10 probes answered, slowest {slowest:?}",
        10 - failures.len()
    );
    assert!(
        failures.is_empty(),
        "{} of 10 probes unanswered with {IDLE} idle connections open:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// Wrong passwords were answered after 0.3 s each but in parallel (150–204
/// guesses a second), each with a log line. Fifty sent at once from one
/// address now get three answers (the free guesses) and 47 refusals (429
/// with `Retry-After`), the log sums them up in one line instead of fifty,
/// and the operator signing in from another address meanwhile gets in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parallel_wrong_guesses_are_refused_and_summed_up_while_the_operator_signs_in() {
    use std::time::{Duration, Instant};

    let (db, _pool) = migrated_test_db().await;
    let console = start(&db.url, &[], &[("OUTBOX_CONSOLE_PASSWORD", "s3cret")]);
    let attacker = reqwest::Client::new();
    let url = console.url("/login");
    let guesses = (0..50).map(|i| {
        let (attacker, url) = (attacker.clone(), url.clone());
        tokio::spawn(async move {
            let r = attacker
                .post(&url)
                .form(&[("password", format!("guess-{i}"))])
                .send()
                .await
                .unwrap();
            let retry_after = r
                .headers()
                .get("retry-after")
                .map(|v| v.to_str().unwrap().parse::<u64>().unwrap());
            (r.status().as_u16(), retry_after)
        })
    });
    let mut answers = Vec::new();
    for g in futures::future::join_all(guesses).await {
        answers.push(g.unwrap());
    }
    let wrong = answers.iter().filter(|a| **a == (401, None)).count();
    let refused = answers
        .iter()
        .filter(|(s, after)| *s == 429 && after.is_some_and(|s| s >= 1))
        .count();
    assert_eq!((wrong, refused), (3, 47), "{answers:?}");

    // The right password from the guessing address waits too…
    let (status, _, body) = post(&client(), &console, "/login", &[("password", "s3cret")]).await;
    assert_eq!(status, 429, "{body}");
    assert!(body.contains("Too many sign-in attempts"), "{body}");
    // …while the operator, elsewhere, gets in.
    let operator = reqwest::Client::builder()
        .local_address(std::net::IpAddr::from([127, 0, 0, 2]))
        .cookie_store(true)
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let r = operator
        .post(&url)
        .form(&[("password", "s3cret")])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 303);
    assert_eq!(r.headers()["location"], "/");
    let r = operator.get(console.url("/")).send().await.unwrap();
    assert_eq!(r.status(), 200, "the operator's session does not serve");

    // One summary line, not a line per guess.
    let deadline = Instant::now() + Duration::from_secs(30);
    let summary = loop {
        let log = console.log();
        if let Some(l) = log.iter().find(|l| l.contains("console sign-ins failed")) {
            break l.clone();
        }
        assert!(Instant::now() < deadline, "no summary line in {log:#?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert!(
        summary.contains("3 wrong passwords and 48 refused as too many")
            && summary.contains("most from 127.0.0.1 (51)"),
        "{summary}"
    );
    let log = console.log();
    let about_guesses = log.iter().filter(|l| l.contains("wrong")).count();
    assert_eq!(about_guesses, 1, "{log:#?}");
}

/// A method a route does not take was answered 404 (`GET /pause`) or
/// handled as another route's: it is 405 with the route's methods in
/// `Allow`. An action posted without the selection its confirmation
/// carries acted on whatever matched: it is refused with 400 naming the
/// missing field, nothing changed.
#[tokio::test]
async fn a_wrong_method_is_405_with_allow_and_an_unconfirmed_action_is_refused() {
    use reqwest::Method;

    let (db, pool) = migrated_test_db().await;
    insert(&pool, "dead-1", 1, true).await;
    let console = start(&db.url, &[], &[]);
    let c = client();
    let (_, page) = get(&c, &console, "/").await;
    let token = csrf(&page);

    for (method, path, allow) in [
        (Method::GET, "/pause", "POST"),
        (Method::GET, "/dead-letters/apply", "POST"),
        (Method::POST, "/events", "GET, HEAD"),
        (Method::POST, "/metrics", "GET, HEAD"),
        (Method::PUT, "/", "GET, HEAD"),
        (Method::DELETE, "/login", "GET, HEAD, POST"),
        (
            Method::POST,
            "/events/00000000-0000-0000-0000-000000000000",
            "GET, HEAD",
        ),
    ] {
        let r = c
            .request(method.clone(), console.url(path))
            .form(&[("csrf", token.as_str())])
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 405, "{method} {path}");
        assert_eq!(
            r.headers().get("allow").map(|v| v.to_str().unwrap()),
            Some(allow),
            "{method} {path}"
        );
    }
    assert_eq!(get(&c, &console, "/no-such-page").await.0, 404);

    let (status, _, body) = post(
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
    assert_eq!(status, 400, "{body}");
    assert!(
        body.contains("Cannot read <code>selection</code>") && body.contains("confirm first"),
        "{body}"
    );
    assert_eq!(
        count(&pool, "SELECT count(*) FROM outbox_dead_letters").await,
        1
    );
}

/// Every U+202E (right-to-left override) of `html` shown as text, outside
/// a `<bdi>`: none when stored text is isolated from what surrounds it.
fn unisolated_overrides(html: &str) -> Vec<String> {
    let (mut in_tag, mut depth, mut found) = (false, 0i32, Vec::new());
    for (i, c) in html.char_indices() {
        let rest = &html[i..];
        match c {
            '<' => {
                in_tag = true;
                if rest.starts_with("<bdi>") || rest.starts_with("<bdi ") {
                    depth += 1;
                } else if rest.starts_with("</bdi>") {
                    depth -= 1;
                }
            }
            '>' => in_tag = false,
            '\u{202e}' if !in_tag && depth == 0 => {
                let from = html[..i].char_indices().rev().nth(60).map_or(0, |(j, _)| j);
                found.push(html[from..i].to_owned());
            }
            _ => {}
        }
    }
    found
}

/// A U+202E in a stored aggregate type, aggregate id, event type, error or
/// `paused_by` would reverse the rest of the sentence or cell it sits in
/// ("aggregate type X" in the pauses table, `type/id` in the events
/// table), so each stored value is isolated in a `<bdi>` on the overview,
/// the stuck aggregates, the dead letters, the event page and the notice
/// after a pause.
#[tokio::test]
async fn stored_text_with_bidi_controls_is_isolated_wherever_it_is_shown() {
    let (db, pool) = migrated_test_db().await;
    let rlo = "\u{202e}";
    sqlx::query("INSERT INTO outbox_pauses (aggregate_type, paused_by) VALUES ($1, $2)")
        .bind(format!("ord{rlo}er"))
        .bind(format!("ops{rlo} (10.0.0.1)"))
        .execute(&pool)
        .await
        .unwrap();
    let id: uuid::Uuid = sqlx::query_scalar(
        "INSERT INTO outbox_events
             (aggregate_type, aggregate_id, event_type, payload, attempts, last_error,
              dead_lettered_at, topic)
         VALUES ($1, $1, $1, '{}', 10, $1, now(), $1) RETURNING id",
    )
    .bind(format!("x{rlo}y"))
    .fetch_one(&pool)
    .await
    .unwrap();
    let console = start(&db.url, &[], &[]);
    let c = client();
    let (_, overview) = get(&c, &console, "/").await;
    assert!(
        overview.contains(&format!("<bdi><code>ord{rlo}er</code></bdi>"))
            && overview.contains(&format!("<bdi>ops{rlo} (10.0.0.1)</bdi>")),
        "{overview}"
    );
    let token = csrf(&overview);
    let (status, _, _) = post(
        &c,
        &console,
        "/pause",
        &[
            ("scope", "type"),
            ("aggregate_type", &format!("b{rlo}c")),
            ("csrf", &token),
        ],
    )
    .await;
    assert_eq!(status, 303);
    let (_, after_pause) = get(&c, &console, "/").await;
    assert!(
        after_pause.contains(&format!(
            "Delivery paused for aggregate type <bdi><code>b{rlo}c</code></bdi>."
        )),
        "{after_pause}"
    );
    for path in [
        "/".to_owned(),
        "/stuck".to_owned(),
        "/dead-letters".to_owned(),
        format!("/events?aggregate_type=x{rlo}y&aggregate_id=x{rlo}y"),
        format!("/events/{id}"),
    ] {
        let (status, page) = get(&c, &console, &path).await;
        assert_eq!(status, 200, "{path}: {page}");
        assert!(page.contains(rlo), "{path} shows no stored value: {page}");
        let loose = unisolated_overrides(&page);
        assert!(loose.is_empty(), "{path}: not isolated after {loose:#?}");
    }
}

/// A failed read showed the database's message twice ("reading pauses:
/// error returned from database: relation … does not exist: relation …
/// does not exist"). It is said once, after what was being done.
#[tokio::test]
async fn a_database_error_is_shown_once_after_what_was_being_done() {
    let (db, pool) = migrated_test_db().await;
    let console = start(&db.url, &[], &[]);
    let c = client();
    assert_eq!(get(&c, &console, "/").await.0, 200);
    sqlx::query("ALTER TABLE outbox_pauses RENAME TO outbox_pauses_gone")
        .execute(&pool)
        .await
        .unwrap();
    for path in ["/", "/overview.json"] {
        let (status, body) = get(&c, &console, path).await;
        assert_eq!(status, 500, "{path}: {body}");
        assert_eq!(body.matches("does not exist").count(), 1, "{path}: {body}");
        assert!(body.contains("reading "), "{path}: {body}");
    }
}
