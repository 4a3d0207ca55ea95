//! Parsing `--publisher` specs.

use std::sync::Arc;

use anyhow::{bail, Context, Result};
use outbox::Publisher;
use outbox_publishers::{FilePublisher, StdoutPublisher};

/// Builds the publisher named by `spec`: `stdout` or `file:PATH`.
pub fn from_spec(spec: &str) -> Result<Arc<dyn Publisher>> {
    if spec == "stdout" {
        return Ok(Arc::new(StdoutPublisher));
    }
    if let Some(path) = spec.strip_prefix("file:") {
        if path.is_empty() {
            bail!("invalid --publisher {spec:?}: file: needs a path, e.g. file:/var/lib/outbox/events.jsonl");
        }
        let publisher = FilePublisher::open(path)
            .with_context(|| format!("cannot open --publisher file {path:?}"))?;
        return Ok(Arc::new(publisher));
    }
    bail!("unknown --publisher {spec:?}: use stdout or file:PATH")
}
