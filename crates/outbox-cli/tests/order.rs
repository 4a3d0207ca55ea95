//! Order across processes: two relays at once, one killed with SIGKILL and
//! another started mid-run; first deliveries stay in enqueue order.

mod common;

use std::time::Duration;

use outbox::Outbox;
use outbox_testkit::wait_until;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_relays_one_killed_one_joining_keep_per_aggregate_order() {
    let (db, pool, _dir, file) = common::db_and_events_file().await;
    let mut a = common::spawn_relay(&db.url, &file, "relay-a", &[]);
    let mut b = common::spawn_relay(&db.url, &file, "relay-b", &[]);

    let (aggs, rounds) = (200, 40);
    let mut all = Vec::new();
    let outbox = Outbox::new();
    for n in 1..=rounds {
        let round = common::round(aggs, n);
        all.extend(round.iter().map(|e| e.id));
        outbox.enqueue_many(&pool, &round).await.unwrap();
        if n == rounds / 3 {
            wait_until(
                "both relays to own partitions",
                Duration::from_secs(30),
                || async {
                    let owners: i64 = sqlx::query_scalar(
                    "SELECT count(DISTINCT owner) FROM outbox_partitions WHERE lease_until > now()",
                )
                .fetch_one(&pool)
                .await
                .unwrap();
                    owners == 2
                },
            )
            .await;
            a.kill().unwrap();
            a.wait().unwrap();
        }
        if n == rounds / 2 {
            let c = common::spawn_relay(&db.url, &file, "relay-c", &[]);
            a = c;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    wait_until("everything delivered", Duration::from_secs(90), || async {
        let left: i64 = sqlx::query_scalar("SELECT count(*) FROM outbox_events")
            .fetch_one(&pool)
            .await
            .unwrap();
        left == 0
    })
    .await;
    for child in [&mut a, &mut b] {
        // graceful stop
        let _ = std::process::Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status();
        let status = child.wait().unwrap();
        assert!(status.success(), "graceful stop exits 0: {status:?}");
    }
    let (lines, dups) = common::check_deliveries(&file, &all);
    eprintln!("{} events, {lines} lines, {dups} duplicates", all.len());
    // One SIGKILL: at most its in-flight window repeats.
    assert!(
        dups <= common::IN_FLIGHT_WINDOW,
        "{dups} duplicates after one kill"
    );
}
