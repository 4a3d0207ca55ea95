//! The watchdog: ends a process group and removes its directory once the
//! process that started the group is gone.

use std::ffi::OsString;
use std::io;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use super::Signal;

/// How often the script looks at the owner and the group, in seconds.
const TICK_SECS: f64 = 0.5;

/// The watchdog script.
///
/// Arguments: the owner's pid, the group's id, the first signal's name, the
/// pid file (or empty), the grace period in ticks, the directory to remove
/// (or empty), the tick in seconds.
///
/// While the owner lives it polls both; once the group is gone it stops
/// looking at it (its id could be reused) and exits, unless it still has a
/// directory to remove. Once the owner is gone it sends the first signal, to
/// the process named by the pid file's first line if there is one (to the
/// group's leader with `TERM` if that file cannot be read) and otherwise to
/// the whole group, waits for the group to end (or the pid file to go) for
/// at most the grace period, kills what is left of the group and removes the
/// directory.
const SCRIPT: &str = r#"
parent=$1 group=$2 signal=$3 pid_file=$4 ticks=$5 dir=$6 tick=$7
while kill -0 "$parent" 2>/dev/null; do
  if [ -n "$group" ] && ! kill -0 -"$group" 2>/dev/null; then
    [ -n "$dir" ] || exit 0
    group=
  fi
  sleep "$tick"
done
if [ -n "$group" ]; then
  target=-$group
  if [ -n "$pid_file" ]; then
    pid=$(head -n 1 "$pid_file" 2>/dev/null)
    case $pid in
      '' | *[!0-9]*) target=$group signal=TERM ;;
      *) target=$pid ;;
    esac
  fi
  kill -"$signal" "$target" 2>/dev/null
  i=0
  while [ "$i" -lt "$ticks" ] && kill -0 -"$group" 2>/dev/null; do
    if [ -n "$pid_file" ] && [ ! -e "$pid_file" ]; then break; fi
    i=$((i + 1))
    sleep "$tick"
  done
  kill -KILL -"$group" 2>/dev/null
fi
if [ -n "$dir" ]; then rm -rf "$dir"; fi
exit 0
"#;

/// What happens to a [`Group`](super::Group) once the process that started
/// it is gone (checked every half second).
///
/// The leader of a group whose owner died is reaped by whoever adopts it,
/// which in some containers is nobody; so the wait for the group to end is
/// bounded by a grace period, never open-ended.
#[derive(Debug, Clone)]
pub struct Watchdog {
    signal: Signal,
    pid_file: Option<PathBuf>,
    grace: Duration,
    remove: Option<PathBuf>,
}

impl Watchdog {
    /// Kills the whole group (`SIGKILL`) at once, and gives it a second to
    /// go before removing anything.
    pub fn kill_group() -> Watchdog {
        Watchdog {
            signal: Signal::Kill,
            pid_file: None,
            grace: Duration::from_secs(1),
            remove: None,
        }
    }

    /// First sends `signal` to the process whose pid is the first line of
    /// `pid_file` (the group's leader gets `SIGTERM` when there is no such
    /// line yet), waits up to `grace` for the group to end or that file to
    /// go, then kills whatever is left of the group.
    pub fn signal_pid_file(
        signal: Signal,
        pid_file: impl Into<PathBuf>,
        grace: Duration,
    ) -> Watchdog {
        Watchdog {
            signal,
            pid_file: Some(pid_file.into()),
            grace,
            remove: None,
        }
    }

    /// Also removes `dir` (recursively) once the group has been ended.
    pub fn removing(self, dir: impl Into<PathBuf>) -> Watchdog {
        Watchdog {
            remove: Some(dir.into()),
            ..self
        }
    }

    /// Starts the script watching group `group` on behalf of this process.
    pub(super) fn spawn(&self, group: u32) -> io::Result<Child> {
        let ticks = (self.grace.as_secs_f64() / TICK_SECS).ceil() as u64;
        let path = |p: &Option<PathBuf>| p.clone().map(OsString::from).unwrap_or_default();
        Command::new("sh")
            .arg("-c")
            .arg(SCRIPT)
            .arg("outbox-watchdog")
            .arg(std::process::id().to_string())
            .arg(group.to_string())
            .arg(self.signal.name())
            .arg(path(&self.pid_file))
            .arg(ticks.to_string())
            .arg(path(&self.remove))
            .arg(TICK_SECS.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            // Away from the owner's group, so that what ends the owner
            // (Ctrl-C, a test runner) does not end the watchdog with it.
            .process_group(0)
            .spawn()
    }
}
