//! Processes killed the hard way leave nothing behind: a `SIGKILL`ed
//! `outbox bench` takes its child relay with it, even while the bench is
//! an unreaped zombie, so a caller reading the bench's output to the end
//! is not left waiting on the child's copy of it.

mod common;

use std::io::Read;
use std::process::Stdio;
use std::sync::mpsc;
use std::time::{Duration, Instant};

#[tokio::test]
async fn a_sigkilled_bench_takes_its_child_relay_with_it() {
    let db = outbox_testkit::postgres::test_db().await;
    let mut bench = common::bin()
        .args(["bench", "latency", "--producer", "sql", "--rate", "20"])
        .args(["--seconds", "600"])
        .env("DATABASE_URL", &db.url)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start outbox bench");
    let mut stderr = bench.stderr.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut all = Vec::new();
        let _ = stderr.read_to_end(&mut all);
        let _ = tx.send(all);
    });
    let until = Instant::now() + Duration::from_secs(60);
    let child = loop {
        if let Some(&pid) = common::relays_on(&db.url).first() {
            break pid;
        }
        assert!(Instant::now() < until, "the bench started no child relay");
        std::thread::sleep(Duration::from_millis(50));
    };

    // Killed and, on purpose, not reaped yet: a zombie still answers
    // `kill -0`, which is all an old watchdog looked at.
    bench.kill().unwrap();
    let ended = rx.recv_timeout(Duration::from_secs(20));
    let left = common::relays_on(&db.url);
    let _ = bench.wait();
    if !left.is_empty() {
        for pid in &left {
            let _ = std::process::Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status();
        }
    }
    assert!(
        ended.is_ok(),
        "the bench's stderr stayed open 20 s after it was killed (child relay {child} holds it)"
    );
    assert_eq!(left, Vec::<u32>::new(), "a child relay outlived the bench");
}
