//! The Redis Streams publisher: each event is an `XADD`; a call's `XADD`s
//! go out in one pipelined round trip, and an event is delivered when
//! Redis answered its `XADD` with an entry id.
//!
//! The entry's shape is in `message.rs`, what a reply means in
//! `classify.rs`; the settling of a call is here: an error reply concerns
//! one event, a failed round trip the whole call.

use std::borrow::Cow;
use std::time::Duration;

use async_trait::async_trait;
use outbox::redact::{hide, redact_text, redact_url};
use outbox::{Event, Outcome, Publisher, Unavailable};
use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, Value};
use tokio::sync::Mutex;

use super::classify::{classify_reply, is_transport};
use super::config::RedisConfig;
use crate::broker::answer::Answer;
use crate::broker::publisher::{
    broker_publisher, connect_within, or_retry, partial_outage, PIPELINED_CALLS,
};
use crate::{Envelope, Error, Template};

/// Appends events to Redis streams.
///
/// * stream key: the event's topic override, or [`RedisConfig::stream`];
/// * fields, in this order: `id`, `aggregate_type`, `aggregate_id`,
///   `event_type`, `payload` (the JSON text as stored), `headers` (the
///   producer's headers as a JSON object), `created_at` (RFC 3339, UTC);
/// * with a CloudEvents [`Envelope`] ([`RedisPublisher::with_envelope`];
///   Redis has no CloudEvents binding, so the entry follows the Kafka
///   binding's names with fields for headers): binary mode writes the
///   attributes as `ce_*` fields, then `content-type`
///   (`application/json`), `payload` (as stored) and `headers`; structured
///   mode writes `content-type` (`application/cloudevents+json`),
///   `payload` (the CloudEvent) and `headers`;
/// * entry id: assigned by Redis (`*`); with [`RedisConfig::maxlen`],
///   `MAXLEN ~ N` trims the stream as it grows.
///
/// An event is [`Outcome::Delivered`] once Redis answered its `XADD` with
/// an entry id (and, with [`RedisConfig::wait_replicas`], once `WAIT`
/// counted enough replicas). What that means for durability depends on the
/// server's persistence settings: see `docs/publishers.md`. The connection
/// is opened on the first publish or health check, and again after it was
/// lost.
pub struct RedisPublisher {
    pub(super) config: RedisConfig,
    pub(super) stream: Template,
    client: redis::Client,
    conn: Mutex<Option<MultiplexedConnection>>,
    pub(super) envelope: Envelope,
}

broker_publisher!(RedisPublisher(RedisConfig) {
    /// Entries follow `envelope` (plain by default).
    fn with_envelope;
    /// A publisher for `redis://[USER:PASS@]HOST:PORT[/DB]` with default
    /// settings.
    fn from_url;
});

impl RedisPublisher {
    /// Validates `config`. Nothing is connected until the first publish or
    /// health check, so a server that is down now is not an error here.
    pub fn new(config: RedisConfig) -> Result<Self, Error> {
        config.validate()?;
        let client = config.client()?;
        let stream = config.destination_template()?;
        Ok(RedisPublisher {
            config,
            stream,
            client,
            conn: Mutex::new(None),
            envelope: Envelope::plain(),
        })
    }

    fn where_(&self) -> String {
        redact_url(&self.config.url)
    }

    /// A client error as text: the URL's password hidden wherever the
    /// client may have quoted it.
    fn scrub(&self, text: String) -> String {
        let shown = self.where_();
        let text = text.replace(&self.config.url, &shown);
        let settings = self.client.get_connection_info().redis_settings();
        let password = settings.password().unwrap_or_default();
        redact_text(&hide(&text, password, &shown))
    }

    async fn connect(&self) -> Result<MultiplexedConnection, String> {
        let connect = Duration::from_millis(self.config.connect_timeout_ms);
        let settings = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(connect))
            .set_response_timeout(Some(Duration::from_millis(self.config.response_timeout_ms)));
        // The client's timeout covers the TCP connect; this one the
        // handshake (authentication, database selection) too.
        let mut conn = connect_within(
            "redis",
            &self.where_(),
            connect * 2,
            self.client
                .get_multiplexed_async_connection_with_config(&settings),
            |text| self.scrub(text),
        )
        .await?;
        // A server that wants a password accepts the connection without
        // one and refuses each command after: find out now.
        let pong: Result<String, _> = redis::cmd("PING").query_async(&mut conn).await;
        match pong {
            Ok(_) => Ok(conn),
            Err(e) => Err(self.scrub(format!("cannot use redis at {}: {e}", self.where_()))),
        }
    }

    /// The connection, opened if needed.
    async fn connection(&self) -> Result<MultiplexedConnection, Unavailable> {
        let mut guard = self.conn.lock().await;
        if let Some(conn) = guard.as_ref() {
            return Ok(conn.clone());
        }
        let conn = self.connect().await.map_err(Unavailable::new)?;
        *guard = Some(conn.clone());
        Ok(conn)
    }

    /// Gives up the connection (the next publish opens a new one).
    async fn drop_connection(&self) {
        self.conn.lock().await.take();
    }

    /// `WAIT wait_replicas wait_timeout_ms` after a batch; `Err` with why
    /// if fewer replicas acknowledged its writes.
    async fn wait_replicas(&self, conn: &mut MultiplexedConnection) -> Result<(), String> {
        let Some(wanted) = self.config.wait_replicas else {
            return Ok(());
        };
        let got: Result<i64, _> = redis::cmd("WAIT")
            .arg(wanted)
            .arg(self.config.wait_timeout_ms)
            .query_async(conn)
            .await;
        match got {
            Ok(n) if n >= i64::from(wanted) => Ok(()),
            Ok(n) => Err(format!(
                "redis at {}: WAIT counted {n} of {wanted} replicas within {} ms (wait_replicas); \
                 the entries are on the primary and will be sent again",
                self.where_(),
                self.config.wait_timeout_ms
            )),
            Err(e) => Err(self.scrub(format!("redis at {}: WAIT failed: {e}", self.where_()))),
        }
    }
}

#[async_trait]
impl Publisher for RedisPublisher {
    fn name(&self) -> &str {
        "redis"
    }

    fn destination(&self, event: &Event) -> Option<String> {
        self.stream.destination(event).ok().map(Cow::into_owned)
    }

    /// The multiplexed connection pipelines calls in order: a batch that
    /// joins while a call waits for its replies is sent at once in a call
    /// of its own ([`PIPELINED_CALLS`]).
    fn concurrent_calls(&self) -> usize {
        PIPELINED_CALLS
    }

    fn events_per_call(&self) -> usize {
        usize::MAX
    }

    async fn publish(&self, batch: &[Event]) -> Result<Vec<Outcome>, Unavailable> {
        let mut conn = self.connection().await?;

        let mut outcomes: Vec<Option<Outcome>> = vec![None; batch.len()];
        let mut sent: Vec<(usize, String)> = Vec::with_capacity(batch.len());
        let mut pipe = redis::pipe();
        pipe.ignore_errors();
        for (i, event) in batch.iter().enumerate() {
            match self.xadd(event) {
                Ok((cmd, key)) => {
                    pipe.add_command(cmd);
                    sent.push((i, key));
                }
                Err(why) => outcomes[i] = Some(Outcome::Rejected(why)),
            }
        }
        if sent.is_empty() {
            return Ok(outcomes.into_iter().flatten().collect());
        }

        // One round trip for the call.
        let replies: Vec<Value> = match pipe.query_async(&mut conn).await {
            Ok(replies) => replies,
            Err(e) => {
                let mut why = self.scrub(format!("redis at {}: {e}", self.where_()));
                if e.is_timeout() {
                    why.push_str(&format!(
                        " (no answer within response_timeout_ms = {})",
                        self.config.response_timeout_ms
                    ));
                }
                if is_transport(&e) {
                    // Some entries may have been added before the link
                    // failed; they are sent again (consumers deduplicate
                    // by id).
                    self.drop_connection().await;
                    return Err(Unavailable::new(why));
                }
                for (i, _) in &sent {
                    outcomes[*i] = Some(Outcome::Retry(why.clone()));
                }
                return Ok(outcomes.into_iter().flatten().collect());
            }
        };
        if replies.len() != sent.len() {
            self.drop_connection().await;
            return Err(Unavailable::new(format!(
                "redis at {} answered {} of {} commands",
                self.where_(),
                replies.len(),
                sent.len()
            )));
        }

        let mut outage: Option<String> = None;
        let mut added = Vec::with_capacity(sent.len());
        for ((i, key), reply) in sent.into_iter().zip(replies) {
            let answer = match reply {
                Value::BulkString(_) | Value::SimpleString(_) | Value::VerbatimString { .. } => {
                    added.push(i);
                    Answer::Outcome(Outcome::Delivered)
                }
                Value::ServerError(e) => {
                    classify_reply(&e, &format!("at {}, stream {key:?}", self.where_()))
                }
                other => Answer::Outcome(Outcome::Retry(format!(
                    "redis at {}, stream {key:?}: XADD answered {other:?} instead of an entry id",
                    self.where_()
                ))),
            };
            match answer {
                Answer::Outcome(o) => outcomes[i] = Some(o),
                Answer::Transport(why) => {
                    outage.get_or_insert(why);
                }
            }
        }

        if !added.is_empty() {
            if let Err(why) = self.wait_replicas(&mut conn).await {
                for i in &added {
                    outcomes[*i] = None;
                }
                outage.get_or_insert(why);
            }
        }

        let Some(why) = outage else {
            return Ok(or_retry(outcomes, "redis gave no answer"));
        };
        // Start afresh: after a protocol error the server has closed this
        // connection, and a new one says at once what is wrong with it.
        self.drop_connection().await;
        partial_outage(outcomes, why)
    }

    async fn health(&self) -> Result<(), Unavailable> {
        let mut conn = self.connection().await?;
        let pong: Result<String, _> = redis::cmd("PING").query_async(&mut conn).await;
        match pong {
            Ok(_) => Ok(()),
            Err(e) => {
                if is_transport(&e) {
                    self.drop_connection().await;
                }
                Err(Unavailable::new(
                    self.scrub(format!("redis at {}: {e}", self.where_())),
                ))
            }
        }
    }

    async fn close(&self) {
        self.drop_connection().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{assert_unreachable_is_an_outage, free_port};

    #[tokio::test]
    async fn unreachable_server_is_an_outage_and_hides_the_password() {
        let port = free_port();
        let p = RedisPublisher::from_url(&format!("redis://u:hunter2@127.0.0.1:{port}/0")).unwrap();
        assert_unreachable_is_an_outage(&p, &port.to_string(), &["hunter2"]).await;
    }
}
