//! The consumer side: turning at-least-once delivery into an exactly-once
//! effect.

use sqlx::PgConnection;
use uuid::Uuid;

use crate::error::{Error, Result};
use crate::queries as q;
use crate::schema::Schema;

/// Longest consumer name, in characters.
pub const MAX_CONSUMER_CHARS: usize = 200;

/// Records processed events in `processed_events`, inside the consumer's own
/// transaction.
///
/// ```no_run
/// # async fn handle(pool: sqlx::PgPool, event_id: uuid::Uuid) -> outbox::Result<()> {
/// let inbox = outbox::Inbox::new();
/// let mut tx = pool.begin().await.unwrap();
/// if inbox.process_once(&mut tx, "billing", event_id).await? {
///     // apply the event's effect with &mut *tx …
/// }
/// tx.commit().await.unwrap(); // a rollback forgets the event was seen
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct Inbox {
    insert: String,
}

impl Default for Inbox {
    fn default() -> Self {
        Self::new()
    }
}

impl Inbox {
    /// An inbox in the `public` schema.
    pub fn new() -> Self {
        Self::with_schema(Schema::default())
    }

    /// An inbox in `schema`.
    pub fn with_schema(schema: Schema) -> Self {
        Inbox {
            insert: schema.render(q::INBOX_PROCESSED_INSERT),
        }
    }

    /// Returns `true` the first time `consumer` sees `event_id` (process the
    /// event in the same transaction), `false` for a duplicate (skip it).
    /// The mark is part of the caller's transaction: if that rolls back, the
    /// event counts as unseen again. Concurrent calls for the same event
    /// wait for each other; exactly one gets `true`.
    pub async fn process_once(
        &self,
        conn: &mut PgConnection,
        consumer: &str,
        event_id: Uuid,
    ) -> Result<bool> {
        if consumer.chars().count() > MAX_CONSUMER_CHARS {
            return Err(Error::invalid(
                "consumer",
                format!("is longer than {MAX_CONSUMER_CHARS} characters"),
            ));
        }
        let done = sqlx::query(&self.insert)
            .bind(consumer)
            .bind(event_id)
            .execute(conn)
            .await
            .map_err(Error::db("recording a processed event"))?;
        Ok(done.rows_affected() == 1)
    }
}
