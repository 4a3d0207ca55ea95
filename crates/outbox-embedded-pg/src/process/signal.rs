//! Sending signals to a process or a process group.
//!
//! With `geteuid` (running as root), the only operating-system calls of
//! the crate that std does not wrap: `libc` calls that take and return
//! plain integers.
#![allow(unsafe_code)]

/// A signal this crate sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Signal {
    /// `SIGINT`: PostgreSQL's fast shutdown.
    Int,
    /// `SIGQUIT`: PostgreSQL's immediate shutdown.
    Quit,
    /// `SIGTERM`.
    Term,
    /// `SIGKILL`, as in a crash.
    Kill,
    /// `SIGSTOP`: freezes the process, as on a hung host.
    Stop,
    /// `SIGCONT`: lets a stopped process run again.
    Cont,
}

impl Signal {
    /// The name `kill -NAME` takes (`INT`, `KILL`, …).
    pub fn name(self) -> &'static str {
        match self {
            Signal::Int => "INT",
            Signal::Quit => "QUIT",
            Signal::Term => "TERM",
            Signal::Kill => "KILL",
            Signal::Stop => "STOP",
            Signal::Cont => "CONT",
        }
    }

    fn number(self) -> libc::c_int {
        match self {
            Signal::Int => libc::SIGINT,
            Signal::Quit => libc::SIGQUIT,
            Signal::Term => libc::SIGTERM,
            Signal::Kill => libc::SIGKILL,
            Signal::Stop => libc::SIGSTOP,
            Signal::Cont => libc::SIGCONT,
        }
    }

    /// Sends the signal to process `pid`; `false` if it is gone (or not
    /// this process's to signal).
    pub fn send(self, pid: u32) -> bool {
        // SAFETY: kill only sends a signal; a positive pid names one process,
        // never a group or every process.
        above(pid, 0).is_some_and(|pid| unsafe { libc::kill(pid, self.number()) } == 0)
    }

    /// Sends the signal to every process of group `pgid`; `false` if the
    /// group is gone.
    pub fn send_group(self, pgid: u32) -> bool {
        // SAFETY: killpg only sends a signal; a group id above 1 names one
        // group (0 would mean the caller's own).
        above(pgid, 1).is_some_and(|pgid| unsafe { libc::killpg(pgid, self.number()) } == 0)
    }
}

/// `id` as a `pid_t`, if it is above `floor`.
fn above(id: u32, floor: libc::pid_t) -> Option<libc::pid_t> {
    libc::pid_t::try_from(id).ok().filter(|&id| id > floor)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nothing_is_sent_to_pid_zero_or_a_negative_pid() {
        assert!(!Signal::Kill.send(0));
        assert!(!Signal::Kill.send(u32::MAX));
        assert!(!Signal::Kill.send_group(0));
        assert!(!Signal::Kill.send_group(1));
    }
}
