//! `--publisher file:PATH`: appends JSON lines to a file and makes them
//! durable (fsync) before acknowledging.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use outbox::{Event, Outcome, Publisher, Unavailable};

/// Appends each batch to a file with a single `write` in append mode, then
/// `fsync`s it; only then are the events reported delivered. Several
/// processes may append to one file: each batch lands whole.
#[derive(Debug, Clone)]
pub struct FilePublisher {
    path: PathBuf,
    file: Arc<Mutex<File>>,
}

impl FilePublisher {
    /// Opens (creating if needed) `path` for appending.
    pub fn open(path: impl AsRef<Path>) -> std::io::Result<Self> {
        let path = path.as_ref().to_path_buf();
        let file = OpenOptions::new().create(true).append(true).open(&path)?;
        Ok(FilePublisher {
            path,
            file: Arc::new(Mutex::new(file)),
        })
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
        let bytes = super::json_lines(batch);
        let file = self.file.clone();
        let path = self.path.clone();
        tokio::task::spawn_blocking(move || {
            let mut f = file.lock().expect("file lock");
            f.write_all(&bytes)?;
            f.sync_data()
        })
        .await
        .map_err(|e| Unavailable::new(format!("file writer failed: {e}")))?
        .map_err(|e| Unavailable::new(format!("writing {}: {e}", path.display())))?;
        Ok(vec![Outcome::Delivered; batch.len()])
    }

    async fn health(&self) -> Result<(), Unavailable> {
        let file = self.file.lock().expect("file lock");
        file.metadata()
            .map(|_| ())
            .map_err(|e| Unavailable::new(format!("{}: {e}", self.path.display())))
    }
}
