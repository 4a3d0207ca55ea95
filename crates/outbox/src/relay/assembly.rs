//! What serves one schema, put together in one place for a relay of one
//! source ([`super::RelayBuilder::spawn`]) and for each source of a relay
//! of many (`sources/source.rs`): the lease round and the table worker
//! beside it, and in the WAL mode the slot reader, all sharing the
//! schema's publisher, settings, totals, observer, wake-ups and tracer.
//!
//! The two relays differ only in how they supervise these tasks: a relay of
//! one source starts them once and stops when one fails (its caller sees
//! the error); a source starts its worker when woken, lets it go dormant
//! when idle, and starts what failed again after a wait that doubles.

use std::sync::Arc;
use std::time::Duration;

use sqlx::PgPool;
use tokio::sync::{watch, Notify};
use tokio::task::JoinHandle;
use tracing::Instrument;

use super::deliver::pauses::PauseWatch;
use super::deliver::Core;
use super::lease::{lease_loop, LeaseLoop};
use super::observe::{RelayObserver, RelayStats};
use super::ownership::Ownership;
use super::store::Store;
use super::wal::session::Session;
use super::wal::{self, ReplicationTarget, SlotState};
use super::worker::{self, Exit, Worker};
use super::{RelayConfig, Retention};
use crate::error::Result;
use crate::publisher::Publisher;
use crate::schema::Schema;
use crate::wakeup::Wakeup;

/// The longest idle poll of the table in the WAL mode (or `poll_max_ms`, if
/// longer): there the table holds only the events the reader set aside,
/// and the reader wakes the worker when it does (another instance's reader
/// through the idle announcement's NOTIFY), so the poll is only the
/// fallback for a lost notification.
const WAL_MODE_TABLE_POLL_MAX_MS: u64 = 5_000;

/// Everything one schema is served with.
#[derive(Clone)]
pub(crate) struct Assembly {
    pub pool: PgPool,
    pub schema: Schema,
    pub publisher: Arc<dyn Publisher>,
    pub config: RelayConfig,
    pub stats: Arc<RelayStats>,
    pub observer: Option<Arc<dyn RelayObserver>>,
    /// Producers' commits, the reader's set-asides and pause changes wake
    /// the worker here.
    pub wakeup: Arc<Wakeup>,
    /// Another instance announced a partition change on the schema's channel.
    pub rebalance: Arc<Notify>,
    #[cfg(feature = "opentelemetry")]
    pub tracer: Option<Arc<crate::trace::PublishTracer>>,
}

/// The lease round and the worker of one schema's table, running.
pub(crate) struct Table {
    pub lease: JoinHandle<()>,
    pub worker: JoinHandle<Result<Exit>>,
}

/// How the table's tasks start.
pub(crate) struct TableStart {
    pub store: Store,
    pub ownership: Arc<Ownership>,
    /// The schema's partition count.
    pub total: usize,
    /// The first lease round has run already (the worker's first step is
    /// then a claim).
    pub first_round_done: bool,
    /// The schema is read through its slot too: the table holds only
    /// what the reader sets aside.
    pub reads_slot: bool,
    /// Idle this long, the worker goes dormant; `None`: never.
    pub dormant_after: Option<Duration>,
    /// Ends both tasks (the worker finishes its batch first).
    pub shutdown: watch::Receiver<bool>,
}

impl Assembly {
    /// The schema's table, as the worker and the lease round read it.
    pub(crate) fn store(&self) -> Store {
        Store::new(
            self.pool.clone(),
            &self.schema,
            self.config.retention == Retention::Keep,
        )
    }

    /// Starts the lease round and the worker, in the caller's span.
    pub(crate) fn start_table(&self, start: TableStart) -> Table {
        let channel = self.schema.channel();
        let lease = tokio::spawn(
            lease_loop(
                LeaseLoop {
                    store: start.store.clone(),
                    ownership: start.ownership.clone(),
                    wakeup: self.wakeup.clone(),
                    observer: self.observer.clone(),
                    total: start.total,
                    channel: channel.clone(),
                    rebalance: self.rebalance.clone(),
                    first_round_done: start.first_round_done,
                },
                start.shutdown.clone(),
            )
            .instrument(tracing::Span::current()),
        );
        let mut config = self.config.clone();
        if start.reads_slot {
            config.poll_max_ms = config.poll_max_ms.max(WAL_MODE_TABLE_POLL_MAX_MS);
        }
        let worker = Worker::new(worker::Deps {
            store: Arc::new(start.store),
            ownership: start.ownership,
            publisher: self.publisher.clone(),
            config,
            wakeup: self.wakeup.clone(),
            shutdown: start.shutdown,
            stats: self.stats.clone(),
            observer: self.observer.clone(),
            channel,
            #[cfg(feature = "opentelemetry")]
            tracer: self.tracer.clone(),
            dormant_after: start.dormant_after,
        });
        Table {
            lease,
            worker: tokio::spawn(worker.run().instrument(tracing::Span::current())),
        }
    }

    /// Starts the schema's slot reader on slot `slot` (publication
    /// `publication`) on its own task, reading through `target` from
    /// `first` if a session is open, until `shutdown`. It wakes the table
    /// worker (`wakeup`) when it sets events aside, and reads the pause
    /// changes that wake-up carries.
    pub(crate) fn start_reader(
        &self,
        target: ReplicationTarget,
        shutdown: watch::Receiver<bool>,
        slot: String,
        publication: String,
        first: Option<Session>,
    ) -> (JoinHandle<Result<()>>, Arc<SlotState>) {
        let state = Arc::new(SlotState::default());
        let (pool, schema) = (&self.pool, &self.schema);
        let reader = wal::reader::Reader {
            aside: wal::set_aside::SetAside::new(pool.clone(), schema),
            switch: wal::switch::Switch::new(pool.clone(), schema),
            position: wal::position::Position::new(pool.clone(), schema),
            core: Core::new(
                self.publisher.clone(),
                &self.config,
                #[cfg(feature = "opentelemetry")]
                self.tracer.clone(),
            ),
            pauses: PauseWatch::new(pool.clone(), schema, self.wakeup.clone()),
            target,
            slot,
            publication,
            config: self.config.clone(),
            stats: self.stats.clone(),
            observer: self.observer.clone(),
            shutdown,
            state: state.clone(),
            // Read when each session starts.
            blocked: Default::default(),
            switch_mark: None,
            fence: 0,
            wakeup: self.wakeup.clone(),
            incoming: wal::incoming::Incoming {
                prefix: crate::wal::message_prefix(schema),
                admission: Default::default(),
                next_seq: 0,
                stats: self.stats.clone(),
                observer: self.observer.clone(),
            },
        };
        (tokio::spawn(reader.run(first)), state)
    }
}
