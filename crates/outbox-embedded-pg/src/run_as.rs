//! Running `initdb` and `postgres` as the `postgres` user when the process
//! is root (both refuse to run as root).

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::process::{is_executable, on_path};
use crate::PgError;

/// The operating-system user the server runs as when the process is root.
pub(crate) const OS_USER: &str = "postgres";

/// How to run a program as [`OS_USER`]: through `runuser`.
#[derive(Debug, Clone)]
pub(crate) struct RunAs {
    runuser: PathBuf,
    uid: u32,
    gid: u32,
}

impl RunAs {
    /// `Some` when the process is root (and `runuser` and the user exist),
    /// `None` when programs can simply be run.
    pub(crate) fn needed() -> Result<Option<RunAs>, PgError> {
        if !is_root() {
            return Ok(None);
        }
        let runuser = find_runuser().ok_or(PgError::NoRunuser)?;
        let (uid, gid) = lookup_user(OS_USER).ok_or(PgError::NoPostgresUser)?;
        Ok(Some(RunAs { runuser, uid, gid }))
    }

    /// A `Command` running `program` as [`OS_USER`].
    pub(crate) fn command(&self, program: &Path) -> Command {
        let mut cmd = Command::new(&self.runuser);
        cmd.args(["-u", OS_USER, "--"]).arg(program);
        cmd
    }

    /// Makes [`OS_USER`] the owner of `dir`.
    pub(crate) fn hand_over(&self, dir: &Path) -> Result<(), PgError> {
        std::os::unix::fs::chown(dir, Some(self.uid), Some(self.gid)).map_err(|e| {
            PgError::io(
                format!("handing {} to the `{OS_USER}` user", dir.display()),
                e,
            )
        })
    }
}

fn find_runuser() -> Option<PathBuf> {
    on_path("runuser").or_else(|| {
        ["/usr/sbin/runuser", "/sbin/runuser"]
            .into_iter()
            .map(PathBuf::from)
            .find(|p| is_executable(p))
    })
}

#[allow(unsafe_code)]
fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions, cannot fail and touches no memory.
    unsafe { libc::geteuid() == 0 }
}

/// The uid and gid of user `name`, from `/etc/passwd` or else `id`.
fn lookup_user(name: &str) -> Option<(u32, u32)> {
    if let Ok(passwd) = fs::read_to_string("/etc/passwd") {
        for line in passwd.lines() {
            let fields: Vec<&str> = line.split(':').collect();
            if fields.len() >= 4 && fields[0] == name {
                if let (Ok(uid), Ok(gid)) = (fields[2].parse(), fields[3].parse()) {
                    return Some((uid, gid));
                }
            }
        }
    }
    let id = |flag: &str| -> Option<u32> {
        let output = Command::new("id")
            .args([flag, name])
            .stdin(Stdio::null())
            .stderr(Stdio::null())
            .output()
            .ok()?;
        if !output.status.success() {
            return None;
        }
        String::from_utf8_lossy(&output.stdout).trim().parse().ok()
    };
    Some((id("-u")?, id("-g")?))
}
