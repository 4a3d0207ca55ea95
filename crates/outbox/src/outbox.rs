//! The producer side: writing events in the caller's transaction.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use sqlx::{PgExecutor, PgPool};
use uuid::Uuid;

use crate::error::{Error, Result};
use crate::event::NewEvent;
use crate::queries as q;
use crate::schema::Schema;
use crate::wakeup::Wakeup;
use crate::wal::DeliveryMode;

/// The five columns every insert of one event binds first, in this order:
/// id, aggregate type, aggregate id, event type, payload.
fn bind_columns<'q>(
    query: sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments>,
    event: &'q NewEvent,
) -> sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments> {
    query
        .bind(event.id)
        .bind(&event.aggregate_type)
        .bind(&event.aggregate_id)
        .bind(&event.event_type)
        .bind(sqlx::types::Json(&event.payload))
}

/// The headers written for an event: with the feature `opentelemetry`, the
/// caller's plus the current trace context unless they name a
/// `traceparent`; without it, the caller's.
fn stored_headers(headers: &BTreeMap<String, String>) -> Cow<'_, BTreeMap<String, String>> {
    #[cfg(feature = "opentelemetry")]
    return crate::trace::headers_to_store(headers);
    #[cfg(not(feature = "opentelemetry"))]
    Cow::Borrowed(headers)
}

/// A handle for producers: writes events on the caller's connection or
/// transaction and never begins or commits it. Cheap to clone.
///
/// ```no_run
/// # async fn order(pool: sqlx::PgPool) -> Result<(), Box<dyn std::error::Error>> {
/// use outbox::{NewEvent, Outbox};
/// let outbox = Outbox::new();
/// let mut tx = pool.begin().await?;
/// sqlx::query("INSERT INTO orders (id, total) VALUES ($1, $2)")
///     .bind(42_i64).bind(10_i64).execute(&mut *tx).await?;
/// outbox
///     .enqueue(&mut *tx, &NewEvent::new("order", "42", "order.created", &serde_json::json!({"total": 10}))?)
///     .await?;
/// tx.commit().await?;
/// outbox.wake(); // optional: the relay picks the event up at once
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct Outbox {
    schema: Schema,
    insert_plain: Arc<str>,
    insert_one: Arc<str>,
    insert_many: Arc<str>,
    emit_one: Arc<str>,
    emit_many: Arc<str>,
    delivery: DeliveryMode,
    wakeup: Arc<Wakeup>,
}

impl Default for Outbox {
    fn default() -> Self {
        Self::new()
    }
}

impl Outbox {
    /// A handle on the `public` schema with an in-process wake-up only.
    pub fn new() -> Self {
        Self::with_schema(Schema::default())
    }

    /// A handle on `schema`.
    pub fn with_schema(schema: Schema) -> Self {
        Outbox {
            insert_plain: schema.render(q::EVENT_INSERT_PLAIN).into(),
            insert_one: schema.render(q::EVENT_INSERT_ONE).into(),
            insert_many: schema.render(q::EVENT_INSERT_MANY).into(),
            emit_one: schema.render(q::EVENT_EMIT_ONE).into(),
            emit_many: schema.render(q::EVENT_EMIT_MANY).into(),
            delivery: DeliveryMode::Table,
            schema,
            wakeup: Wakeup::local(),
        }
    }

    /// Makes [`Outbox::wake`] also notify relays in other processes, with at
    /// most one `NOTIFY` per `min_interval` sent on `pool` (never inside the
    /// caller's transaction). Must be called inside a tokio runtime.
    pub fn with_remote_wakeup(mut self, pool: PgPool, min_interval: Duration) -> Self {
        self.wakeup = Wakeup::with_notify(pool, self.schema.channel(), min_interval);
        self
    }

    /// Writes events the way `mode` wants: [`DeliveryMode::Wal`] calls
    /// `outbox_emit` (a logical message, no row) for a schema migrated with
    /// `outbox migrate --mode wal`. The default, [`DeliveryMode::Table`],
    /// inserts rows; in a WAL-mode schema those are captured into messages
    /// too, by a trigger, at a higher cost than calling `outbox_emit`.
    /// Calling `outbox_emit` on a table-mode schema inserts the row, so a
    /// handle left in the WAL mode after a switch back loses nothing.
    pub fn with_delivery(mut self, mode: DeliveryMode) -> Self {
        self.delivery = mode;
        self
    }

    /// The delivery mode this handle writes for.
    pub fn delivery(&self) -> DeliveryMode {
        self.delivery
    }

    /// The schema this handle writes to.
    pub fn schema(&self) -> &Schema {
        &self.schema
    }

    /// The wake-up shared with relays built from this handle.
    pub fn wakeup(&self) -> Arc<Wakeup> {
        self.wakeup.clone()
    }

    /// Writes one event on `conn` (pass `&mut *tx` to write inside your
    /// transaction). Validates it first; nothing is written if it is invalid.
    /// Returns the event id.
    pub async fn enqueue<'c, E: PgExecutor<'c>>(&self, conn: E, event: &NewEvent) -> Result<Uuid> {
        event.validate()?;
        let headers = stored_headers(&event.headers);
        if self.delivery == DeliveryMode::Wal {
            let headers = serde_json::to_value(&*headers).map_err(|source| Error::Serialize {
                field: "headers",
                source,
            })?;
            sqlx::query(&self.emit_one)
                .bind(&event.aggregate_type)
                .bind(&event.aggregate_id)
                .bind(&event.event_type)
                .bind(sqlx::types::Json(&event.payload))
                .bind(sqlx::types::Json(headers))
                .bind(&event.topic)
                .bind(event.id)
                .execute(conn)
                .await
                .map_err(Error::db("emitting an event"))?;
            return Ok(event.id);
        }
        if headers.is_empty() && event.topic.is_none() {
            bind_columns(sqlx::query(&self.insert_plain), event)
                .execute(conn)
                .await
                .map_err(Error::db("enqueueing an event"))?;
            return Ok(event.id);
        }
        let headers = serde_json::to_value(&*headers).map_err(|source| Error::Serialize {
            field: "headers",
            source,
        })?;
        bind_columns(sqlx::query(&self.insert_one), event)
            .bind(sqlx::types::Json(headers))
            .bind(&event.topic)
            .execute(conn)
            .await
            .map_err(Error::db("enqueueing an event"))?;
        Ok(event.id)
    }

    /// Writes many events in one statement, in the given order. All are
    /// validated first; if any is invalid nothing is written and the error
    /// names its index.
    pub async fn enqueue_many<'c, E: PgExecutor<'c>>(
        &self,
        conn: E,
        events: &[NewEvent],
    ) -> Result<Vec<Uuid>> {
        if events.is_empty() {
            return Ok(Vec::new());
        }
        let n = events.len();
        let (mut ids, mut types, mut aggs, mut kinds) = (
            Vec::with_capacity(n),
            Vec::with_capacity(n),
            Vec::with_capacity(n),
            Vec::with_capacity(n),
        );
        let (mut payloads, mut headers, mut topics) = (
            Vec::with_capacity(n),
            Vec::with_capacity(n),
            Vec::with_capacity(n),
        );
        for (i, event) in events.iter().enumerate() {
            event.validate().map_err(|e| match e {
                Error::Invalid { field, reason } => Error::Invalid {
                    field: format!("events[{i}].{field}"),
                    reason,
                },
                other => other,
            })?;
            ids.push(event.id);
            types.push(event.aggregate_type.as_str());
            aggs.push(event.aggregate_id.as_str());
            kinds.push(event.event_type.as_str());
            payloads.push(event.payload.to_string());
            headers.push(
                serde_json::to_string(&*stored_headers(&event.headers)).map_err(|source| {
                    Error::Serialize {
                        field: "headers",
                        source,
                    }
                })?,
            );
            topics.push(event.topic.as_deref());
        }
        let statement = match self.delivery {
            DeliveryMode::Wal => &self.emit_many,
            _ => &self.insert_many,
        };
        sqlx::query(statement)
            .bind(&ids)
            .bind(&types)
            .bind(&aggs)
            .bind(&kinds)
            .bind(&payloads)
            .bind(&headers)
            .bind(&topics)
            .execute(conn)
            .await
            .map_err(Error::db("enqueueing events"))?;
        Ok(ids)
    }

    /// Tells relays that events were committed. Call it after your commit;
    /// without it the relay still finds the events by polling.
    pub fn wake(&self) {
        self.wakeup.wake();
    }
}
