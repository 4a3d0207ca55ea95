//! `--publisher file:PATH`: appends JSON lines to a file and makes them
//! durable (fsync) before acknowledging.

use std::fs::{File, FileType, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{FileExt, FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use outbox::{Event, Outcome, Publisher, Unavailable};
use rustix::fs::FlockOperation;

use crate::Envelope;

/// Appends each batch to a file with a single `write` in append mode, then
/// `fsync`s it; only then are the events reported delivered. Several
/// processes may append to one file: each batch is written under an
/// exclusive `flock`, so batches never interleave.
///
/// A process killed in the middle of its `write` (SIGKILL cuts a large
/// write short) leaves a torn last line; it was never acknowledged, so its
/// events come again. Before each batch, under the lock, a tail that does
/// not end in a newline is cut back to the last complete line, so the next
/// batch never glues onto it and every line of the file stays one JSON
/// document.
#[derive(Debug, Clone)]
pub struct FilePublisher {
    path: PathBuf,
    file: Arc<Mutex<File>>,
    envelope: Envelope,
}

impl FilePublisher {
    /// Opens (creating if needed) `path` for appending. Only a regular file
    /// is accepted: a FIFO, a device, a directory or a socket is refused at
    /// once (the open never waits for a reader), since none of them can make
    /// a batch durable.
    pub fn open(path: impl AsRef<Path>) -> io::Result<Self> {
        let path = path.as_ref().to_path_buf();
        Self::check(&path)?;
        // O_NONBLOCK: should the path become a FIFO after the check, the
        // open fails or returns at once instead of waiting for a reader; it
        // changes nothing for a regular file.
        let file = OpenOptions::new()
            .create(true)
            .read(true)
            .append(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&path)?;
        refuse_unless_regular(file.metadata()?.file_type())?;
        Ok(FilePublisher {
            path,
            file: Arc::new(Mutex::new(file)),
            envelope: Envelope::plain(),
        })
    }

    /// Checks, without opening or creating anything, that `path` can be
    /// published to: an existing regular file (symbolic links followed), or
    /// a missing file in an existing directory.
    pub fn check(path: impl AsRef<Path>) -> io::Result<()> {
        let path = path.as_ref();
        match std::fs::metadata(path) {
            Ok(meta) => refuse_unless_regular(meta.file_type()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                let parent = match path.parent() {
                    Some(p) if !p.as_os_str().is_empty() => p,
                    _ => Path::new("."),
                };
                match std::fs::metadata(parent) {
                    Ok(meta) if meta.is_dir() => Ok(()),
                    Ok(_) => Err(io::Error::new(
                        io::ErrorKind::InvalidInput,
                        format!("{} is not a directory", parent.display()),
                    )),
                    Err(e) => Err(io::Error::new(
                        e.kind(),
                        format!("directory {}: {e}", parent.display()),
                    )),
                }
            }
            Err(e) => Err(e),
        }
    }

    /// Lines follow `envelope`: the outbox's own JSON lines for `plain`, one
    /// structured-mode CloudEvent per line for either CloudEvents format.
    pub fn with_envelope(mut self, envelope: Envelope) -> Self {
        self.envelope = envelope;
        self
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

#[async_trait]
impl Publisher for FilePublisher {
    fn name(&self) -> &str {
        "file"
    }

    async fn publish(&self, batch: &[Event]) -> Result<Vec<Outcome>, Unavailable> {
        let bytes = super::json_lines(batch, &self.envelope);
        let file = self.file.clone();
        let path = self.path.clone();
        let shown = path.clone();
        tokio::task::spawn_blocking(move || {
            let mut f = file.lock().expect("file lock");
            flock(&f, FlockOperation::LockExclusive)?;
            let written = cut_torn_tail(&f, &path)
                .and_then(|()| f.write_all(&bytes))
                .and_then(|()| f.sync_data());
            let unlocked = flock(&f, FlockOperation::Unlock);
            written.and(unlocked)
        })
        .await
        .map_err(|e| Unavailable::new(format!("file writer failed: {e}")))?
        .map_err(|e| Unavailable::new(format!("writing {}: {e}", shown.display())))?;
        Ok(vec![Outcome::Delivered; batch.len()])
    }

    async fn health(&self) -> Result<(), Unavailable> {
        let file = self.file.lock().expect("file lock");
        file.metadata()
            .map(|_| ())
            .map_err(|e| Unavailable::new(format!("{}: {e}", self.path.display())))
    }
}

/// `flock(2)` on `file`, as an `io::Result`.
fn flock(file: &File, operation: FlockOperation) -> io::Result<()> {
    rustix::fs::flock(file, operation).map_err(io::Error::from)
}

/// Cuts a last line without its newline (left by a writer killed in the
/// middle of its `write`) back to the end of the last complete line. Call
/// with the file's `flock` held: then no live writer is half-way through.
fn cut_torn_tail(file: &File, path: &Path) -> io::Result<()> {
    let len = file.metadata()?.len();
    let mut last = [0u8; 1];
    if len == 0 || (file.read_exact_at(&mut last, len - 1).is_ok() && last[0] == b'\n') {
        return Ok(());
    }
    let mut keep = 0;
    let mut end = len;
    let mut chunk = vec![0u8; 64 * 1024];
    while end > 0 {
        let start = end.saturating_sub(chunk.len() as u64);
        let part = &mut chunk[..(end - start) as usize];
        file.read_exact_at(part, start)?;
        if let Some(i) = part.iter().rposition(|&b| b == b'\n') {
            keep = start + i as u64 + 1;
            break;
        }
        end = start;
    }
    tracing::warn!(
        path = %path.display(),
        bytes = len - keep,
        "dropping a torn last line (a writer died in the middle of a batch; its events come again)"
    );
    file.set_len(keep)
}

/// An error unless `kind` is a regular file, naming what it is instead.
fn refuse_unless_regular(kind: FileType) -> io::Result<()> {
    if kind.is_file() {
        return Ok(());
    }
    let what = if kind.is_dir() {
        "a directory"
    } else if kind.is_fifo() {
        "a FIFO (named pipe)"
    } else if kind.is_char_device() {
        "a character device"
    } else if kind.is_block_device() {
        "a block device"
    } else if kind.is_socket() {
        "a socket"
    } else {
        "not a regular file"
    };
    Err(io::Error::new(
        io::ErrorKind::InvalidInput,
        format!(
            "it is {what}, not a regular file: file: appends to a regular file (created if missing), e.g. file:/var/lib/outbox/events.jsonl"
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fifo(dir: &Path) -> PathBuf {
        let path = dir.join("fifo");
        let status = std::process::Command::new("mkfifo")
            .arg(&path)
            .status()
            .expect("mkfifo");
        assert!(status.success());
        path
    }

    #[tokio::test]
    async fn a_torn_last_line_is_cut_before_the_next_batch() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("events.jsonl");
        std::fs::write(&path, "{\"whole\":1}\n{\"torn\":").unwrap();
        let publisher = FilePublisher::open(&path).unwrap();
        let batch = [
            crate::test_support::event("a", &[]),
            crate::test_support::event("b", &[]),
        ];
        publisher.publish(&batch).await.unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3, "{text}");
        assert_eq!(lines[0], "{\"whole\":1}");
        for line in &lines {
            serde_json::from_str::<Box<serde_json::value::RawValue>>(line)
                .unwrap_or_else(|e| panic!("not one JSON document: {line:?}: {e}"));
        }
        // A file that ends in a newline keeps every byte.
        publisher.publish(&batch[..1]).await.unwrap();
        let again = std::fs::read_to_string(&path).unwrap();
        assert!(again.starts_with(&text) && again.lines().count() == 4);
    }

    #[test]
    fn only_regular_files_are_opened_and_nothing_waits() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = fifo(dir.path());
        for (path, kind) in [
            (fifo.as_path(), "FIFO"),
            (Path::new("/dev/null"), "character device"),
            (dir.path(), "directory"),
        ] {
            let err = FilePublisher::open(path).unwrap_err().to_string();
            assert!(err.contains(kind) && err.contains("regular file"), "{err}");
            let err = FilePublisher::check(path).unwrap_err().to_string();
            assert!(err.contains(kind), "{err}");
        }
        let file = dir.path().join("events.jsonl");
        FilePublisher::check(&file).unwrap();
        assert!(!file.exists(), "check creates nothing");
        FilePublisher::open(&file).unwrap();
        FilePublisher::check(&file).unwrap();
        let err = FilePublisher::check(dir.path().join("missing/x.jsonl"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("missing"), "{err}");
    }
}
