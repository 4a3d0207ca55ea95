//! What the daemon hands either assembly of a relay and takes back from
//! it: what it set up around the relay ([`Around`]), the relay started
//! with its readiness checks and side tasks ([`Started`]), and why a
//! drain could not count what is pending ([`DrainCheck`]). Both
//! assemblies (`one.rs`, `sources.rs`) import this, and `running.rs`
//! imports them: no assembly imports the face that joins them.

use std::sync::Arc;

use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::daemon::http::{Ready, RelayState};
use crate::daemon::metrics::{Metrics, RelayInfo};
use crate::daemon::telemetry::Export;

/// What the daemon set up for the relay, which the assembly wires in.
pub(super) struct Around<'a> {
    /// Every source's metrics.
    pub metrics: &'a Arc<Metrics>,
    /// Running or stopping, for `/readyz`.
    pub state: &'a Arc<RelayState>,
    /// The OTLP exporter, when `[tracing]` sets one.
    #[cfg_attr(not(feature = "opentelemetry"), allow(dead_code))]
    pub export: Option<&'a Export>,
    /// Turns true when the relay stops: for the tasks beside it.
    pub stopped: watch::Receiver<bool>,
}

/// A relay started.
pub(super) struct Started<R> {
    /// The relay: [`super::one::One`], [`super::sources::Many`], or
    /// either as a [`super::running::Running`].
    pub running: R,
    /// `/readyz`'s checks (for a relay of one source, only with an HTTP
    /// server).
    pub readiness: Option<Ready>,
    /// Tasks beside the relay, aborted once it stopped.
    pub background: Vec<JoinHandle<()>>,
    /// `outbox_relay_info`'s labels.
    pub info: RelayInfo,
}

impl<R> Started<R> {
    /// The same start, its relay turned by `f`.
    pub(super) fn map<S>(self, f: impl FnOnce(R) -> S) -> Started<S> {
        Started {
            running: f(self.running),
            readiness: self.readiness,
            background: self.background,
            info: self.info,
        }
    }
}

/// Why the events pending could not be counted.
pub(super) enum DrainCheck {
    /// A schema has no outbox tables: the drain would never end.
    Unmigrated(anyhow::Error),
    /// Anything else (a database restarting): counted again at the next tick.
    Failed(anyhow::Error),
    /// Not every source is known yet (a pattern not matched once, a
    /// database not answering): nothing pending among those known says
    /// nothing, so counted again at the next tick.
    NotYet,
}

impl DrainCheck {
    /// Schema `schema` (of source `source`, for a relay of many) has no
    /// outbox tables.
    pub(super) fn unmigrated(source: Option<&str>, schema: &str) -> Self {
        let fix = format!("run `outbox migrate --schema {schema}` on its database");
        DrainCheck::Unmigrated(match source {
            Some(source) => anyhow::anyhow!(
                "source {source}: schema {schema} has no outbox tables, so --drain cannot finish: {fix}, or remove the entry"
            ),
            None => anyhow::anyhow!(
                "schema {schema} has no outbox tables, so --drain cannot finish: {fix}"
            ),
        })
    }
}

impl From<outbox::Error> for DrainCheck {
    fn from(e: outbox::Error) -> Self {
        DrainCheck::Failed(e.into())
    }
}

impl From<sqlx::Error> for DrainCheck {
    fn from(e: sqlx::Error) -> Self {
        DrainCheck::Failed(e.into())
    }
}
