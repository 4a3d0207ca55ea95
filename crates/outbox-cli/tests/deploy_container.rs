//! `deploy/container/`: `build.sh` builds the runtime image with podman
//! from the binary under test (nothing is pulled), and the image runs a
//! real relay against the test's PostgreSQL: it delivers the backlog, its
//! exec probe (`outbox healthcheck` inside the container) and one from
//! outside say ready, and `podman stop` (SIGTERM) ends it with exit 0.

mod common;
mod deploy_support;

use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use deploy_support::{repo, run_ok, tool};
use outbox_testkit::process::free_port;
use outbox_testkit::wait::wait_until_or_explain;

/// An image and a container of it, removed on drop.
struct Podman {
    podman: std::path::PathBuf,
    image: String,
    container: String,
}

impl Podman {
    fn cmd(&self) -> Command {
        let mut cmd = Command::new(&self.podman);
        // crun 1.8 refuses this machine's hybrid cgroups; runc, when
        // installed, does not.
        if tool("runc", &[]).is_some() {
            cmd.args(["--runtime", "runc"]);
        }
        cmd
    }

    fn exec(&self, args: &[&str]) -> Output {
        self.cmd()
            .args(["exec", &self.container])
            .args(args)
            .output()
            .unwrap()
    }
}

impl Drop for Podman {
    fn drop(&mut self) {
        let _ = self.cmd().args(["rm", "-f", &self.container]).output();
        let _ = self.cmd().args(["rmi", "-f", &self.image]).output();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_image_builds_without_pulling_and_runs_a_relay() {
    let Some(podman) = tool("podman", &[]) else {
        return;
    };
    let suffix = uuid::Uuid::new_v4().simple().to_string();
    let p = Podman {
        podman,
        image: format!("localhost/outbox-test:{}", &suffix[..12]),
        container: format!("outbox-test-{}", &suffix[..12]),
    };
    let build = repo().join("deploy/container/build.sh");
    run_ok(
        Command::new(&build)
            .arg(env!("CARGO_BIN_EXE_outbox"))
            .arg(&p.image)
            .env("CONTAINER_TOOL", &p.podman)
            .env("PATH", std::env::var_os("PATH").unwrap_or_default()),
    );
    let size = run_ok(
        p.cmd()
            .args(["image", "inspect", &p.image, "--format", "{{.Size}}"]),
    );
    let size: u64 = common::text(&size.stdout).trim().parse().unwrap();
    let binary = std::fs::metadata(Path::new(env!("CARGO_BIN_EXE_outbox")))
        .unwrap()
        .len();
    eprintln!(
        "image: {} MB, of which the binary {} MB",
        size / 1_000_000,
        binary / 1_000_000
    );
    assert!(
        size < binary + 20_000_000,
        "the image is the binary and little else: {size} bytes for a {binary}-byte binary"
    );

    let (db, pool) = outbox_testkit::postgres::migrated_test_db().await;
    let expected = common::insert_backlog(&pool, 20, 10).await;
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    run_ok(
        p.cmd()
            .args(["run", "-d", "--name", &p.container, "--network", "host"])
            // Limits this sandbox lets a container set (it refuses to
            // raise RLIMIT_NPROC); the relay needs far fewer.
            .args([
                "--ulimit",
                "nofile=4096:4096",
                "--ulimit",
                "nproc=4096:4096",
            ])
            .args(["-e", &format!("DATABASE_URL={}", db.url)])
            .args(["-e", &format!("OUTBOX_HTTP_ADDR={addr}")])
            .arg(&p.image)
            .args(["relay", "--publisher", "stdout", "--instance-id", "boxed"]),
    );
    let pending = || async {
        sqlx::query_scalar::<_, i64>("SELECT count(*) FROM outbox_events")
            .fetch_one(&pool)
            .await
            .unwrap()
    };
    wait_until_or_explain(
        "the relay in the container to deliver the backlog",
        Duration::from_secs(60),
        || async { pending().await == 0 },
        || async {
            let logs = p
                .cmd()
                .args(["logs", "--tail", "20", &p.container])
                .output();
            let logs = logs.map(|o| common::text(&o.stderr)).unwrap_or_default();
            format!("{} pending\n{logs}", pending().await)
        },
    )
    .await;
    let logs = run_ok(p.cmd().args(["logs", &p.container]));
    let printed = common::text(&logs.stdout);
    for id in expected.keys() {
        assert!(printed.contains(&id.to_string()), "{id} was not published");
    }

    // The exec probe, inside (OUTBOX_HTTP_ADDR), and a probe from outside.
    wait_until_or_explain(
        "the relay to say ready",
        Duration::from_secs(30),
        || async {
            p.exec(&["/usr/local/bin/outbox", "healthcheck"])
                .status
                .success()
        },
        || async { common::text(&p.exec(&["/usr/local/bin/outbox", "healthcheck"]).stdout) },
    )
    .await;
    let inside = p.exec(&["/usr/local/bin/outbox", "healthcheck"]);
    assert!(common::text(&inside.stdout).starts_with("ready: running"));
    let outside = common::bin()
        .args(["healthcheck", "--http-addr", &addr])
        .output()
        .unwrap();
    assert!(
        outside.status.success(),
        "{}",
        common::text(&outside.stdout)
    );

    run_ok(p.cmd().args(["stop", "-t", "40", &p.container]));
    let code = run_ok(
        p.cmd()
            .args(["inspect", &p.container, "--format", "{{.State.ExitCode}}"]),
    );
    assert_eq!(
        common::text(&code.stdout).trim(),
        "0",
        "a graceful stop on SIGTERM"
    );
}
