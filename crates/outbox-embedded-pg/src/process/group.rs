//! A child process leading a process group of its own.

use std::io;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use super::{Signal, Watchdog};

/// How often [`Group::wait_exit`] looks.
const EXIT_POLL: Duration = Duration::from_millis(20);

/// How often [`Group::freeze`] looks.
const STOP_POLL: Duration = Duration::from_millis(1);

/// Whether every thread of every process in group `pgid` is stopped (`T`
/// in `/proc/PID/task/TID/stat`); `true` also where `/proc` is not there
/// to tell, since the signal was sent.
fn stopped(pgid: u32) -> bool {
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return true;
    };
    // After the command in parentheses: state, ppid, pgrp, …
    let fields = |path: &std::path::Path| -> Option<(char, u32)> {
        let stat = std::fs::read_to_string(path).ok()?;
        let mut rest = stat.rsplit_once(") ")?.1.split(' ');
        let state = rest.next()?.chars().next()?;
        let pgrp = rest.nth(1)?.parse().ok()?;
        Some((state, pgrp))
    };
    procs.flatten().all(|p| {
        let member = fields(&p.path().join("stat")).is_some_and(|(_, pgrp)| pgrp == pgid);
        !member
            || std::fs::read_dir(p.path().join("task")).is_ok_and(|tasks| {
                tasks.flatten().all(|t| {
                    // A thread gone between the listing and the read is no
                    // answer either way.
                    fields(&t.path().join("stat"))
                        .is_none_or(|(state, _)| matches!(state, 'T' | 't'))
                })
            })
    })
}

/// Why a group's program did not become ready.
#[derive(Debug)]
pub enum NotReady {
    /// Its leader exited.
    Exited(ExitStatus),
    /// The deadline passed.
    TimedOut,
}

/// A child process in a process group of its own, with a [`Watchdog`] that
/// ends the group if this process dies. Dropping it kills the group.
#[derive(Debug)]
pub struct Group {
    leader: Child,
    watchdog: Option<Child>,
}

impl Group {
    /// Spawns `cmd` (stdin closed) as the leader of a new process group and
    /// starts `watchdog` for it.
    ///
    /// # Errors
    ///
    /// If either cannot be started; the leader is killed again when the
    /// watchdog cannot be.
    pub fn spawn(mut cmd: Command, watchdog: &Watchdog) -> io::Result<Group> {
        cmd.process_group(0).stdin(Stdio::null());
        let leader = cmd.spawn()?;
        let mut group = Group {
            leader,
            watchdog: None,
        };
        // On failure, dropping `group` kills the leader.
        group.watchdog = Some(watchdog.spawn(group.id())?);
        Ok(group)
    }

    /// The leader's pid, which is also the group's id.
    pub fn id(&self) -> u32 {
        self.leader.id()
    }

    /// The leader's exit status, if it has exited.
    pub fn exited(&mut self) -> Option<ExitStatus> {
        self.leader.try_wait().ok().flatten()
    }

    /// Sends `signal` to every process of the group.
    pub fn signal(&self, signal: Signal) {
        // Failure means the group is gone already.
        signal.send_group(self.id());
    }

    /// Stops the group (`SIGSTOP`) and waits up to `timeout` until every
    /// thread of the leader is seen stopped; `true` if they were.
    ///
    /// `killpg` only queues the signal: a thread running on another core
    /// can still read a request and answer it before it stops, which makes
    /// a test of a hung server see an answer it should not.
    pub fn freeze(&self, timeout: Duration) -> bool {
        self.signal(Signal::Stop);
        let deadline = Instant::now() + timeout;
        loop {
            if stopped(self.id()) {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(STOP_POLL);
        }
    }

    /// Waits up to `timeout` for the leader to exit; `true` if it did.
    pub fn wait_exit(&mut self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        loop {
            match self.leader.try_wait() {
                Ok(Some(_)) | Err(_) => return true,
                Ok(None) if Instant::now() >= deadline => return false,
                Ok(None) => std::thread::sleep(EXIT_POLL),
            }
        }
    }

    /// Polls `ready` every `every` until it holds, the leader exits, or
    /// `deadline` passes.
    pub fn wait_ready(
        &mut self,
        deadline: Instant,
        every: Duration,
        mut ready: impl FnMut() -> bool,
    ) -> Result<(), NotReady> {
        loop {
            if ready() {
                return Ok(());
            }
            if let Some(status) = self.exited() {
                return Err(NotReady::Exited(status));
            }
            if Instant::now() > deadline {
                return Err(NotReady::TimedOut);
            }
            std::thread::sleep(every);
        }
    }

    /// Kills the whole group (`SIGKILL`), reaps the leader and ends the
    /// watchdog.
    pub fn kill(&mut self) {
        // A group's id is not given to anyone else while any member lives;
        // once none does, only after the pid counter wraps around. So this
        // reaches this group's processes and nobody else's.
        self.signal(Signal::Kill);
        let _ = self.leader.kill();
        let _ = self.leader.wait();
        if let Some(mut watchdog) = self.watchdog.take() {
            // Its group holds its `sleep` too.
            Signal::Kill.send_group(watchdog.id());
            let _ = watchdog.kill();
            let _ = watchdog.wait();
        }
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        self.kill();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether process `pid` still runs (a zombie waiting to be reaped does
    /// not).
    #[cfg(target_os = "linux")]
    fn runs(pid: u32) -> bool {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|stat| Some(stat.rsplit_once(") ")?.1.starts_with(['Z', 'X'])))
            .is_some_and(|dead| !dead)
    }

    fn sh(script: &str) -> Command {
        let mut cmd = Command::new("sh");
        cmd.arg("-c").arg(script);
        cmd
    }

    #[test]
    fn readiness_ends_with_the_leader_or_the_deadline() {
        let mut group = Group::spawn(sh("exit 3"), &Watchdog::kill_group()).expect("spawn");
        let waited = group.wait_ready(
            Instant::now() + Duration::from_secs(10),
            Duration::from_millis(5),
            || false,
        );
        assert!(matches!(waited, Err(NotReady::Exited(s)) if s.code() == Some(3)));

        let mut group = Group::spawn(sh("sleep 30"), &Watchdog::kill_group()).expect("spawn");
        let waited = group.wait_ready(Instant::now(), Duration::from_millis(5), || false);
        assert!(matches!(waited, Err(NotReady::TimedOut)));
        assert!(!group.wait_exit(Duration::from_millis(50)));
        group.signal(Signal::Term);
        assert!(group.wait_exit(Duration::from_secs(10)));
    }

    /// A group of a shell and one member it started (`sleep`), once the
    /// member runs; and the member's pid.
    #[cfg(target_os = "linux")]
    fn group_with_a_member() -> (Group, u32) {
        let dir = tempfile::tempdir().expect("temp dir");
        let pid_file = dir.path().join("member");
        let mut cmd = sh("sleep 30 & echo $! > member; wait");
        cmd.current_dir(dir.path());
        let group = Group::spawn(cmd, &Watchdog::kill_group()).expect("spawn");
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let pid = std::fs::read_to_string(&pid_file).ok();
            if let Some(pid) = pid.and_then(|p| p.trim().parse::<u32>().ok()) {
                return (group, pid);
            }
            assert!(Instant::now() < deadline, "the member never started");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn dropping_a_group_kills_every_member_and_the_watchdog() {
        let (group, member) = group_with_a_member();
        let leader = group.id();
        let watchdog = group.watchdog.as_ref().expect("a watchdog").id();
        assert!(runs(leader) && runs(member) && runs(watchdog));

        drop(group);
        let deadline = Instant::now() + Duration::from_secs(10);
        while runs(member) {
            assert!(Instant::now() < deadline, "the member outlived its group");
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(!runs(leader) && !runs(watchdog));
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_frozen_group_is_stopped_in_every_member_until_thawed() {
        let (group, _member) = group_with_a_member();
        assert!(!stopped(group.id()), "a running group is not stopped");
        assert!(group.freeze(Duration::from_secs(10)));
        assert!(stopped(group.id()));
        group.signal(Signal::Cont);
        let deadline = Instant::now() + Duration::from_secs(10);
        while stopped(group.id()) {
            assert!(
                Instant::now() < deadline,
                "the group stayed stopped after SIGCONT"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}
