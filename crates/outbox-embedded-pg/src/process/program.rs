//! Finding a program to run.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// Whether `path` is a file someone may execute.
pub fn is_executable(path: &Path) -> bool {
    fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// `program` in the first directory of `PATH` that has it as an executable.
pub fn on_path(program: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(program))
        .find(|candidate| is_executable(candidate))
}

/// The first of `candidates` that is an executable (empty paths are
/// skipped), else `program` on `PATH`.
pub fn find_program(candidates: &[PathBuf], program: &str) -> Option<PathBuf> {
    candidates
        .iter()
        .find(|p| !p.as_os_str().is_empty() && is_executable(p))
        .cloned()
        .or_else(|| on_path(program))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn candidates_come_before_path() {
        let sh = on_path("sh").expect("sh on PATH");
        assert!(is_executable(&sh));
        let dir = tempfile::tempdir().expect("temp dir");
        let not_executable = dir.path().join("sh");
        fs::write(&not_executable, "").expect("write");
        let candidates = [PathBuf::new(), not_executable, PathBuf::from("/bin/sh")];
        assert_eq!(
            find_program(&candidates, "sh"),
            Some(PathBuf::from("/bin/sh"))
        );
        assert_eq!(find_program(&candidates[..2], "sh"), Some(sh));
        assert_eq!(find_program(&[], "outbox-no-such-program"), None);
    }
}
