//! Where the PostgreSQL server binaries are.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::process::{is_executable, on_path};
use crate::PgError;

/// Environment variable naming the directory that holds `initdb` and `postgres`.
pub const BIN_DIR_ENV: &str = "OUTBOX_PG_BIN_DIR";

/// Finds the directory holding the PostgreSQL server binaries (`initdb`,
/// `postgres`).
///
/// In order: the `OUTBOX_PG_BIN_DIR` environment variable if set (an error if
/// it lacks either program); `pg_config --bindir` if `pg_config` is on `PATH`
/// and that directory has the programs; the directory of `initdb` on `PATH`
/// (following symlinks); the highest version in `/usr/lib/postgresql/*/bin`
/// (Debian and Ubuntu). If none fits, the error says what to install.
pub fn find_bin_dir() -> Result<PathBuf, PgError> {
    if let Some(dir) = std::env::var_os(BIN_DIR_ENV).filter(|d| !d.is_empty()) {
        let dir = PathBuf::from(dir);
        for program in ["initdb", "postgres"] {
            if !is_executable(&dir.join(program)) {
                return Err(PgError::BadBinDir { dir, program });
            }
        }
        return Ok(dir);
    }

    if let Ok(output) = Command::new("pg_config")
        .arg("--bindir")
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
    {
        if output.status.success() {
            let dir = PathBuf::from(String::from_utf8_lossy(&output.stdout).trim());
            if has_server(&dir) {
                return Ok(dir);
            }
        }
    }

    if let Some(initdb) = on_path("initdb") {
        let real = fs::canonicalize(&initdb).ok();
        for candidate in [real.as_deref(), Some(initdb.as_path())]
            .into_iter()
            .flatten()
            .filter_map(Path::parent)
        {
            if has_server(candidate) {
                return Ok(candidate.to_path_buf());
            }
        }
    }

    if let Some(dir) = newest_debian_bin_dir() {
        return Ok(dir);
    }

    Err(PgError::BinariesNotFound {
        searched: format!(
            "{BIN_DIR_ENV} (unset), `pg_config --bindir`, `initdb` on PATH, \
             /usr/lib/postgresql/*/bin"
        ),
    })
}

fn has_server(dir: &Path) -> bool {
    is_executable(&dir.join("initdb")) && is_executable(&dir.join("postgres"))
}

/// The highest version's `bin` directory under `/usr/lib/postgresql`.
fn newest_debian_bin_dir() -> Option<PathBuf> {
    fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(Result::ok)
        .filter_map(|entry| {
            let name = entry.file_name().into_string().ok()?;
            let version = name
                .split('.')
                .map(str::parse::<u32>)
                .collect::<Result<Vec<_>, _>>()
                .ok()?;
            let bin = entry.path().join("bin");
            has_server(&bin).then_some((version, bin))
        })
        .max_by(|a, b| a.0.cmp(&b.0))
        .map(|(_, bin)| bin)
}
