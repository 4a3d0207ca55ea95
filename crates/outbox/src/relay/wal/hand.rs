//! What a session holds between two events of the stream: the
//! transaction being read, the batch of what was read before it, and what
//! reading ahead left for the session to finish ([`super::ahead`]).

use pgwire_replication::{Lsn, ReplicationEvent};

use crate::event::Event;

#[derive(Default)]
pub(crate) struct InHand {
    /// The events of the transaction being read.
    pub txn: Vec<Event>,
    /// Whether the transaction being read carries a switch mark.
    pub txn_marks: bool,
    /// Whether the transaction being read changed a pause.
    pub txn_pauses: bool,
    /// Read, not yet published.
    pub batch: Vec<Event>,
    /// The end of the last whole transaction in the batch: where the slot
    /// is confirmed once the batch is published.
    pub batch_end: Option<Lsn>,
    /// An event read ahead that only the session may take in (the commit
    /// of a transaction that changed a pause or carries a switch mark):
    /// taken in before the stream is read again.
    pub deferred: Option<ReplicationEvent>,
    /// Why the stream failed while it was read ahead: the session ends
    /// with it once the batch in flight is settled.
    pub failed: Option<String>,
}

impl InHand {
    /// A transaction begins: nothing of it is read yet.
    pub fn begin(&mut self) {
        self.txn.clear();
        self.txn_marks = false;
        self.txn_pauses = false;
    }

    /// Whether nothing of this schema is in hand, so the slot may move.
    pub fn is_empty(&self) -> bool {
        self.batch.is_empty() && self.txn.is_empty() && self.batch_end.is_none()
    }
}
