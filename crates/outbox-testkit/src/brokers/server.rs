//! The launcher every broker shares: [`Server`] finds the broker's program,
//! runs it on a free port of `127.0.0.1` in a process [`Group`] under a
//! [`Watchdog`], waits until it is ready, and stops, freezes, thaws and
//! restarts it; what differs from broker to broker is a [`Launch`].

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use super::{log_to, temp_dir, BrokerError};
use crate::process::{
    connect_local, find_program, free_port, tail_file, Group, NotReady, Signal, Watchdog,
};

/// How many more free ports a start tries when the one it was given turns
/// out to be taken.
const PORT_RETRIES: usize = 3;

/// How many lines of the log a [`BrokerError::Start`] carries.
const TAIL_LINES: usize = 30;

/// How long [`Server::freeze`] waits for the broker's threads to stop.
const FREEZE_TIMEOUT: Duration = Duration::from_secs(5);

/// Where a broker's program is looked for, in this order: the file
/// [`env`](Program::env) names, [`path`](Program::path), then
/// [`binary`](Program::binary) on `PATH`.
#[derive(Debug, Clone, Copy)]
pub struct Program {
    /// Environment variable that may name the program to run.
    pub env: &'static str,
    /// Where a package installs it, if one does.
    pub path: Option<&'static str>,
    /// Its file name, looked up on `PATH` last.
    pub binary: &'static str,
    /// What to do when it is found nowhere; `None`: install the Debian
    /// (Ubuntu) package named as the [binary](Program::binary).
    pub install: Option<&'static str>,
}

impl Program {
    /// `binary` from the Debian (Ubuntu) package of the same name, which
    /// installs it at `path`; `env` may name another one.
    pub const fn package(env: &'static str, path: &'static str, binary: &'static str) -> Program {
        Program {
            env,
            path: Some(path),
            binary,
            install: None,
        }
    }

    /// The first of the places that holds an executable, else
    /// [`BrokerError::NotInstalled`] for `broker`, naming every place looked
    /// at and what to install.
    fn find(&self, broker: &'static str) -> Result<PathBuf, BrokerError> {
        let env = std::env::var_os(self.env).map(PathBuf::from);
        let candidates = [
            env.unwrap_or_default(),
            self.path.map(PathBuf::from).unwrap_or_default(),
        ];
        find_program(&candidates, self.binary).ok_or_else(|| {
            let path = self.path.map(|p| format!("{p}, ")).unwrap_or_default();
            let install = match self.install {
                Some(what) => what.to_owned(),
                None => format!("install it: apt-get install {}", self.binary),
            };
            BrokerError::NotInstalled {
                broker,
                hint: format!(
                    "no {} found (looked at ${}, {path}PATH); {install}",
                    self.binary, self.env
                ),
            }
        })
    }
}

/// Sends `request` to the server on `port` of `127.0.0.1` and reads the
/// first `N` bytes of its answer; `None` if it cannot be reached or answers
/// less.
pub(crate) fn ask<const N: usize>(port: u16, request: &[u8]) -> Option<[u8; N]> {
    let mut stream = connect_local(port)?;
    stream.write_all(request).ok()?;
    let mut answer = [0_u8; N];
    stream.read_exact(&mut answer).ok()?;
    Some(answer)
}

/// What makes one broker differ from another: its program, its command
/// line, and how to tell it is ready. The value holds the broker's own
/// options (a password, extra ports) for the life of its [`Server`].
pub trait Launch {
    /// The name [`super::skipped`] knows the broker by; errors carry it.
    const NAME: &'static str;

    /// Where the broker's program is found.
    const PROGRAM: Program;

    /// The file in the broker's directory that takes its stdout and stderr.
    const OUTPUT: &'static str = "server.log";

    /// A line the broker writes to its [log](Launch::log_path) once it
    /// listens, if it writes one. Readiness then needs this line as well as
    /// the [probe](Launch::ready): another server that took the port first
    /// would answer the probe too.
    const READY_LINE: Option<&'static str> = None;

    /// What [`Launch::ready`] waits for, as a start that times out says.
    const AWAITED: &'static str;

    /// How long a start may take: by default 30 seconds, plenty for a
    /// server that starts in well under one.
    const READY_TIMEOUT: Duration = Duration::from_secs(30);

    /// How often readiness is checked while starting.
    const POLL: Duration = Duration::from_millis(20);

    /// Adds to `cmd` (the program, working in `dir`, its outputs set) the
    /// arguments and environment that run it as this broker on `port` with
    /// its data in `dir`.
    fn command(&self, cmd: &mut Command, dir: &Path, port: u16);

    /// Whether a broker on `port` answers as a ready one does.
    fn ready(port: u16) -> bool;

    /// Done before every start, the broker's own processes stopped: writes
    /// its configuration for `port` into `dir`, starts processes it needs
    /// beside it. None by default.
    fn prepare(&mut self, dir: &Path, port: u16) -> Result<(), BrokerError> {
        let _ = (dir, port);
        Ok(())
    }

    /// The broker's main log file in `dir`: by default its
    /// [output](Launch::OUTPUT).
    fn log_path(&self, dir: &Path) -> PathBuf {
        dir.join(Self::OUTPUT)
    }
}

/// A running (or stopped) broker described by `L`, listening on
/// `127.0.0.1`, with its data and logs in a temporary directory that lives
/// as long as this handle; its process group is killed on drop.
#[derive(Debug)]
pub struct Server<L: Launch> {
    dir: tempfile::TempDir,
    program: PathBuf,
    port: u16,
    launch: L,
    broker: Option<Group>,
    last_start: Duration,
}

impl<L: Launch + Default> Server<L> {
    /// Starts the broker with its default options and waits until it is
    /// ready.
    pub fn start() -> Result<Self, BrokerError> {
        Self::launch(L::default())
    }

    /// [`Server::start`] unless [`super::SKIP_ENV`] names the broker, in
    /// which case it says so on stderr and returns `None`.
    ///
    /// # Panics
    ///
    /// If the broker cannot be started (the message says what is missing).
    pub fn start_or_skip() -> Option<Self> {
        super::start_or_skip(L::NAME, Self::start)
    }
}

impl<L: Launch + Default + Send + 'static> Server<L> {
    /// [`Server::start_or_skip`] on a blocking thread, for async tests.
    ///
    /// # Panics
    ///
    /// As [`Server::start_or_skip`].
    pub async fn start_or_skip_blocking() -> Option<Self> {
        super::start_blocking_or_skip(L::NAME, Self::start).await
    }
}

impl<L: Launch> Server<L> {
    /// Finds the program, starts the broker as `launch` says on a free port
    /// and waits until it is ready. A port found free can be taken by
    /// another server starting at the same moment (tests start several):
    /// then it tries another one, a few times.
    pub(crate) fn launch(launch: L) -> Result<Self, BrokerError> {
        let mut server = Server {
            program: L::PROGRAM.find(L::NAME)?,
            dir: temp_dir(L::NAME)?,
            port: free_port(),
            launch,
            broker: None,
            last_start: Duration::ZERO,
        };
        let mut tries = 0;
        loop {
            match server.start_again() {
                Err(BrokerError::Start { tail, .. })
                    if tries < PORT_RETRIES
                        && tail.to_lowercase().contains("address already in use") =>
                {
                    tries += 1;
                    server.port = free_port();
                }
                other => break other?,
            }
        }
        Ok(server)
    }

    /// The broker's own options, as it was started with.
    pub(crate) fn launcher(&self) -> &L {
        &self.launch
    }

    /// The port clients connect to; the same across restarts.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// How long the last successful start took until the broker was ready.
    pub fn last_start_duration(&self) -> Duration {
        self.last_start
    }

    /// The broker's main log file.
    pub fn log_path(&self) -> PathBuf {
        self.launch.log_path(self.dir.path())
    }

    /// Whether the broker process is running.
    pub fn is_running(&mut self) -> bool {
        self.broker.as_mut().is_some_and(|g| g.exited().is_none())
    }

    /// Kills the broker (`SIGKILL` to its processes, as a crash would). Its
    /// directory stays for [`Server::start_again`]; what of its data
    /// survives is the broker's own (see its module).
    pub fn stop(&mut self) {
        if let Some(mut g) = self.broker.take() {
            g.kill();
        }
    }

    /// Freezes the broker (`SIGSTOP` to its processes): connections stay
    /// open but nothing is read or answered, as with a hung host. Returns
    /// once every thread of the broker is stopped, so nothing sent after
    /// it is answered.
    ///
    /// # Panics
    ///
    /// If the broker's threads are not all stopped within five seconds.
    pub fn freeze(&self) {
        if let Some(g) = &self.broker {
            assert!(
                g.freeze(FREEZE_TIMEOUT),
                "{}: not every thread stopped within {FREEZE_TIMEOUT:?} of SIGSTOP",
                L::NAME
            );
        }
    }

    /// Lets a [frozen](Server::freeze) broker run again (`SIGCONT`).
    pub fn thaw(&self) {
        if let Some(g) = &self.broker {
            g.signal(Signal::Cont);
        }
    }

    /// Starts the broker again on the same port in the same directory, and
    /// waits until it is ready: its [`Launch::READY_LINE`] is in its log and
    /// its [`Launch::ready`] probe holds. On failure the broker is stopped
    /// and the error carries the end of its log.
    pub fn start_again(&mut self) -> Result<(), BrokerError> {
        self.stop();
        let started = Instant::now();
        let base = self.dir.path();
        self.launch.prepare(base, self.port)?;
        let (out, err) = log_to(L::NAME, &base.join(L::OUTPUT))?;
        let mut cmd = Command::new(&self.program);
        cmd.current_dir(base).stdout(out).stderr(err);
        self.launch.command(&mut cmd, base, self.port);
        let watchdog = Watchdog::kill_group().removing(base);
        let group = self
            .broker
            .insert(Group::spawn(cmd, &watchdog).map_err(BrokerError::io(
                L::NAME,
                format!("running {}", self.program.display()),
            ))?);
        let port = self.port;
        let log = self.launch.log_path(base);
        let waited = group.wait_ready(started + L::READY_TIMEOUT, L::POLL, || {
            L::READY_LINE
                .is_none_or(|line| std::fs::read_to_string(&log).is_ok_and(|l| l.contains(line)))
                && L::ready(port)
        });
        let reason = match waited {
            Ok(()) => {
                self.last_start = started.elapsed();
                return Ok(());
            }
            Err(NotReady::Exited(status)) => {
                format!("{} exited with {status}", L::PROGRAM.binary)
            }
            Err(NotReady::TimedOut) => format!(
                "no {} on 127.0.0.1:{port} within {:?}",
                L::AWAITED,
                L::READY_TIMEOUT
            ),
        };
        self.stop();
        Err(self.start_error(reason))
    }

    /// [`BrokerError::Start`] for `reason`, with the end of the broker's
    /// log, or of its [output](Launch::OUTPUT) when it wrote no log.
    fn start_error(&self, reason: String) -> BrokerError {
        let log = self.log_path();
        let log = if log.exists() {
            log
        } else {
            self.dir.path().join(L::OUTPUT)
        };
        BrokerError::Start {
            broker: L::NAME,
            reason,
            tail: tail_file(&log, TAIL_LINES),
            log: log.display().to_string(),
        }
    }

    /// The directory holding the broker's data and logs.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}

impl<L: Launch> Drop for Server<L> {
    /// Kills the broker first; processes its [`Launch`] keeps beside it go
    /// after, as it is dropped.
    fn drop(&mut self) {
        self.stop();
    }
}
