//! Files the program reads whole (the config file, password files): only a
//! regular file of at most a given size is read. The type is checked before
//! opening, the open never waits (`O_NONBLOCK`: a FIFO without a writer
//! would block it for ever), and no more than the limit is read, so a wrong
//! path (a device, a FIFO, a log) is refused at once in one line.

use std::fs::{FileType, OpenOptions};
use std::io::Read;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::Path;

use anyhow::{anyhow, bail, Result};

use crate::text::cut;

/// What is read and how to fix a wrong path, for the messages.
pub struct SmallFile<'a> {
    /// What the file is, as a message names it: `config file`.
    pub what: &'a str,
    /// The largest size read, in bytes.
    pub max_bytes: u64,
    /// What to do instead: `give --config (or OUTBOX_CONFIG) the path of a
    /// TOML file`.
    pub fix: &'a str,
}

impl SmallFile<'_> {
    /// The bytes of `path`, or one line saying why not.
    pub fn read(&self, path: &Path) -> Result<Vec<u8>> {
        let Self {
            what,
            max_bytes,
            fix,
        } = self;
        let shown = path.display().to_string();
        let shown = if shown.chars().count() > 80 {
            cut(&shown)
        } else {
            shown
        };
        if path.as_os_str().is_empty() {
            bail!("the {what} path is empty: {fix}");
        }
        let cannot = |e: std::io::Error| anyhow!("cannot read {what} {shown}: {e}");
        let meta = std::fs::metadata(path).map_err(cannot)?;
        if let Some(kind) = not_a_file(meta.file_type()) {
            bail!("{what} {shown} is {kind}, not a regular file: {fix}");
        }
        let limit = shown_size(*max_bytes);
        let too_big = |size: String| {
            anyhow!(
                "{what} {shown} is {size} bytes: the limit is {max_bytes} bytes ({limit}): {fix}"
            )
        };
        if meta.len() > *max_bytes {
            return Err(too_big(meta.len().to_string()));
        }
        let file = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(path)
            .map_err(cannot)?;
        // The path may have been replaced since it was checked.
        if let Some(kind) = not_a_file(file.metadata().map_err(cannot)?.file_type()) {
            bail!("{what} {shown} is {kind}, not a regular file: {fix}");
        }
        let mut bytes = Vec::new();
        file.take(max_bytes + 1)
            .read_to_end(&mut bytes)
            .map_err(cannot)?;
        if bytes.len() as u64 > *max_bytes {
            return Err(too_big(format!("more than {max_bytes}")));
        }
        Ok(bytes)
    }
}

/// `n` bytes in the largest binary unit that divides it: `1 MiB`, `4 KiB`.
fn shown_size(n: u64) -> String {
    if n >= 1 << 20 && n % (1 << 20) == 0 {
        format!("{} MiB", n >> 20)
    } else if n >= 1 << 10 && n % (1 << 10) == 0 {
        format!("{} KiB", n >> 10)
    } else {
        format!("{n} bytes")
    }
}

/// What `kind` is, unless it is a regular file.
fn not_a_file(kind: FileType) -> Option<&'static str> {
    if kind.is_file() {
        None
    } else if kind.is_dir() {
        Some("a directory")
    } else if kind.is_fifo() {
        Some("a FIFO (named pipe)")
    } else if kind.is_char_device() {
        Some("a character device")
    } else if kind.is_block_device() {
        Some("a block device")
    } else if kind.is_socket() {
        Some("a socket")
    } else {
        Some("not a file")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: SmallFile<'static> = SmallFile {
        what: "password file",
        max_bytes: 4096,
        fix: "give the path of a file holding the password",
    };

    #[test]
    fn devices_fifos_and_directories_are_refused_before_reading() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        let made = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap();
        assert!(made.success());
        for (path, kind) in [
            (Path::new("/dev/zero"), "a character device"),
            (fifo.as_path(), "a FIFO (named pipe)"),
            (dir.path(), "a directory"),
        ] {
            let started = std::time::Instant::now();
            let e = SECRET.read(path).unwrap_err().to_string();
            assert!(
                e.starts_with("password file ")
                    && e.contains(kind)
                    && e.contains("not a regular file")
                    && e.ends_with("give the path of a file holding the password")
                    && !e.contains('\n'),
                "{e}"
            );
            assert!(started.elapsed() < std::time::Duration::from_secs(5));
        }
    }

    #[test]
    fn the_size_is_bounded_and_says_the_limit() {
        let dir = tempfile::tempdir().unwrap();
        let big = dir.path().join("big");
        std::fs::write(&big, "x".repeat(4097)).unwrap();
        let e = SECRET.read(&big).unwrap_err().to_string();
        assert!(
            e.contains("4097 bytes") && e.contains("4096 bytes (4 KiB)"),
            "{e}"
        );
        let ok = dir.path().join("ok");
        std::fs::write(&ok, "x".repeat(4096)).unwrap();
        assert_eq!(SECRET.read(&ok).unwrap().len(), 4096);
        let e = SECRET.read(Path::new("")).unwrap_err().to_string();
        assert!(e.starts_with("the password file path is empty"), "{e}");
        assert_eq!(shown_size(1 << 20), "1 MiB");
        assert_eq!(shown_size(100), "100 bytes");
    }
}
