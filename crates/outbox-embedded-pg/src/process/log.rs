//! A server's log file: where its output goes, and the end of it for an
//! error message.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom};
use std::path::Path;
use std::process::Stdio;

/// How [`open_log`] treats what the file already holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogMode {
    /// Keep it and write after it (a server restarted on the same data).
    Append,
    /// Start the file empty.
    Truncate,
}

/// Opens `path` for writing, creating it.
pub fn open_log(path: &Path, mode: LogMode) -> io::Result<File> {
    let mut options = OpenOptions::new();
    options.create(true);
    match mode {
        LogMode::Append => options.append(true),
        LogMode::Truncate => options.write(true).truncate(true),
    };
    options.open(path)
}

/// [`open_log`], twice: as a child's stdout and stderr.
pub fn child_outputs(path: &Path, mode: LogMode) -> io::Result<(Stdio, Stdio)> {
    let out = open_log(path, mode)?;
    let err = out.try_clone()?;
    Ok((Stdio::from(out), Stdio::from(err)))
}

/// The length of the file at `path`, 0 if there is none: where the next
/// run's output will start, for [`read_since`].
pub fn log_len(path: &Path) -> u64 {
    fs::metadata(path).map_or(0, |m| m.len())
}

/// What the file gained after byte `start` (lossy UTF-8; empty if
/// unreadable).
pub fn read_since(path: &Path, start: u64) -> String {
    let mut bytes = Vec::new();
    if let Ok(mut file) = File::open(path) {
        if file.seek(SeekFrom::Start(start)).is_ok() {
            let _ = file.read_to_end(&mut bytes);
        }
    }
    String::from_utf8_lossy(&bytes).into_owned()
}

/// The last `n` lines of `text`, or `(empty)`.
pub fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    let tail = lines[lines.len().saturating_sub(n)..].join("\n");
    if tail.is_empty() {
        "(empty)".to_owned()
    } else {
        tail
    }
}

/// The last `n` lines of the file at `path`, or a note that it could not
/// be read.
pub fn tail_file(path: &Path, n: usize) -> String {
    match fs::read(path) {
        Ok(bytes) => tail(&String::from_utf8_lossy(&bytes), n),
        Err(e) => format!("(cannot read {}: {e})", path.display()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tail_keeps_the_last_lines() {
        let log: String = (0..100).map(|i| format!("line {i}\n")).collect();
        let t = tail(&log, 40);
        assert!(t.starts_with("line 60\n"));
        assert!(t.ends_with("line 99"));
        assert_eq!(tail("", 40), "(empty)");
    }

    #[test]
    fn a_log_is_appended_to_or_truncated_and_read_from_an_offset() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("server.log");
        assert_eq!(log_len(&path), 0);
        std::io::Write::write_all(&mut open_log(&path, LogMode::Append).unwrap(), b"one\n")
            .unwrap();
        let start = log_len(&path);
        std::io::Write::write_all(&mut open_log(&path, LogMode::Append).unwrap(), b"two\n")
            .unwrap();
        assert_eq!(read_since(&path, start), "two\n");
        assert_eq!(tail_file(&path, 1), "two");
        open_log(&path, LogMode::Truncate).unwrap();
        assert_eq!(tail_file(&path, 5), "(empty)");
        assert!(tail_file(&dir.path().join("missing"), 5).starts_with("(cannot read "));
    }
}
