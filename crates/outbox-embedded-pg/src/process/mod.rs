//! Child processes that do not outlive whoever started them.
//!
//! A server started for a test or a demo runs as the leader of a process
//! [`Group`] of its own, so that one signal reaches it and everything it
//! forks, and so that a terminal's Ctrl-C or a test runner's signals to the
//! starting process's group do not. A [`Watchdog`] (a small `sh` script, in
//! a group of its own too) ends the group and removes its directory once the
//! starting process is gone, even after `SIGKILL`, when no destructor runs.
//!
//! The [cluster](crate::PgCluster) runs on this, and so do the test kit's
//! broker launchers.
//!
//! | concept | here |
//! |---|---|
//! | process group: spawn, signal, wait, kill | [`Group`], [`Signal`] |
//! | cleanup after the starting process dies | [`Watchdog`] |
//! | a server's log, and its tail for an error | [`open_log`], [`child_outputs`], [`read_since`], [`tail`], [`tail_file`] |
//! | finding a program | [`find_program`], [`on_path`], [`is_executable`] |
//! | ports on `127.0.0.1` | [`free_port`], [`connect_local`] |

mod group;
mod log;
mod net;
mod program;
mod signal;
mod watchdog;

pub use group::{Group, NotReady};
pub use log::{child_outputs, log_len, open_log, read_since, tail, tail_file, LogMode};
pub use net::{connect_local, free_port};
pub use program::{find_program, is_executable, on_path};
pub use signal::Signal;
pub use watchdog::Watchdog;
