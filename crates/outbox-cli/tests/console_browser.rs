//! `outbox console` in a real browser: headless Chromium driven over the
//! WebDriver protocol (plain HTTP calls to `chromedriver`). Signs in, reads
//! the figures as the refresh script updates them under the strict CSP,
//! sees hostile rows as text with no script run, retries a ticked dead
//! letter through the confirmation, pauses and resumes delivery.
//!
//! Skipped, saying so, when `chromedriver` is not installed (Debian:
//! `chromium chromium-driver`, which `scripts/test` installs). With
//! `OUTBOX_CONSOLE_SCREENSHOTS=DIR` it also saves PNGs of the pages there
//! (docs/console.md shows them; its "Screenshots" section says how to
//! make them again).

mod console_support;

use console_support::{count, insert, start};
use outbox_testkit::browser::{chromedriver, Browser};
use outbox_testkit::postgres::migrated_test_db;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_browser_signs_in_reads_the_pages_and_fixes_a_dead_letter_with_no_hostile_script_run() {
    let Some(driver_bin) = chromedriver() else {
        println!("SKIPPED: chromedriver not found; install Debian's chromium and chromium-driver (scripts/test does)");
        return;
    };
    let (db, pool) = migrated_test_db().await;
    // Hostile rows: each would set window.pwned if its text ran as HTML.
    sqlx::query(
        "INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload, attempts,
                                    last_error, dead_lettered_at)
         VALUES ('order', '<img src=x onerror=\"window.pwned=1\">', 'order.paid',
                 '{\"html\": \"<script>window.pwned=2</script>\", \"big\": 1e400}', 10,
                 '\"><svg onload=window.pwned=3>', now() - interval '1 hour')",
    )
    .execute(&pool)
    .await
    .unwrap();
    for n in 1..=3 {
        insert(&pool, "poison", n, true).await;
    }
    for n in 1..=5 {
        insert(&pool, &format!("ok-{n}"), 1, false).await;
    }
    let console = start(
        &db.url,
        &[],
        &[("OUTBOX_CONSOLE_PASSWORD", "pw-for-the-browser")],
    );
    let b = Browser::start(&driver_bin).await;

    b.go(&console.url("/")).await;
    b.wait_for("the sign-in page", "return location.pathname === '/login'")
        .await;
    b.screenshot("sign-in").await;
    b.type_in("input[name=password]", "wrong").await;
    b.click("button[type=submit]").await;
    b.wait_for("the refusal", "return !!document.querySelector('p.error')")
        .await;
    assert_eq!(b.text("p.error").await, "Wrong password.");
    b.type_in("input[name=password]", "pw-for-the-browser")
        .await;
    b.click("button[type=submit]").await;
    b.wait_for(
        "the overview",
        "return location.pathname === '/' && !!document.querySelector('.figures')",
    )
    .await;
    assert_eq!(b.text("[data-figure=pending]").await, "5");
    assert_eq!(b.text("[data-figure=dead_letters]").await, "4");
    // The refresh script runs under the CSP and updates the figures.
    sqlx::query("DELETE FROM outbox_events WHERE aggregate_id = 'ok-1'")
        .execute(&pool)
        .await
        .unwrap();
    b.wait_for(
        "the figures to refresh",
        "return document.querySelector('[data-figure=pending]').textContent === '4'",
    )
    .await;
    b.screenshot("overview").await;

    b.go(&console.url("/stuck")).await;
    b.screenshot("stuck").await;
    let stuck = b.text("main table").await;
    assert!(
        stuck.contains(r#"order/<img src=x onerror="window.pwned=1">"#),
        "{stuck}"
    );
    assert!(
        stuck.contains(r#""><svg onload=window.pwned=3>"#),
        "{stuck}"
    );
    b.click("main table tbody tr td:nth-child(2) a").await;
    b.wait_for(
        "the event page",
        "return !!document.getElementById('payload')",
    )
    .await;
    b.screenshot("event").await;
    let payload = b.text("#payload").await;
    assert!(
        payload.contains("<script>window.pwned=2</script>"),
        "{payload}"
    );
    assert!(
        payload.contains(&format!("1{}", "0".repeat(400))),
        "{payload}"
    );

    b.go(&console.url("/events?aggregate_type=order&aggregate_id=poison"))
        .await;
    b.wait_for(
        "the aggregate's history",
        "return document.querySelectorAll('main table tbody tr').length === 3",
    )
    .await;
    b.screenshot("events").await;

    b.go(&console.url("/dead-letters?aggregate_id=poison"))
        .await;
    b.screenshot("dead-letters").await;
    b.click("input[type=checkbox][name=id]").await;
    b.click("button[value=retry]").await;
    b.wait_for(
        "the confirmation",
        "return !!document.getElementById('confirm-count')",
    )
    .await;
    assert_eq!(b.text("#confirm-count").await, "1");
    b.screenshot("confirm").await;
    assert!(b
        .click_and_read("the outcome", "main form button[type=submit]", "p.notice")
        .await
        .starts_with("Retried 1 dead letter"));
    assert_eq!(
        count(
            &pool,
            "SELECT count(*) FROM outbox_dead_letters WHERE aggregate_id = 'poison'"
        )
        .await,
        2
    );

    b.go(&console.url("/")).await;
    b.click("select[name=scope] option[value=all]").await;
    assert_eq!(
        b.click_and_read("the pause", "form[action='/pause'] button", "p.notice")
            .await,
        "Delivery paused for everything."
    );
    assert_eq!(
        count(
            &pool,
            "SELECT count(*) FROM outbox_pauses WHERE aggregate_type IS NULL"
        )
        .await,
        1
    );
    assert_eq!(
        b.click_and_read("the resume", "form[action='/resume'] button", "p.notice")
            .await,
        "Delivery resumed for everything."
    );
    assert_eq!(count(&pool, "SELECT count(*) FROM outbox_pauses").await, 0);

    // No hostile text ran anywhere along the way.
    assert_eq!(
        b.script("return window.pwned === undefined").await,
        json!(true)
    );
    b.call(reqwest::Method::DELETE, "", None).await;
}
