//! The NATS JetStream publisher: each event is a JetStream publish, and it
//! is delivered when the stream's PubAck comes back.
//!
//! One file for the connection's life cycle and the settling of a call:
//! whether a silence is an outage depends on what the connection did
//! meanwhile.

use std::borrow::Cow;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex as StdMutex};
use std::time::Duration;

use async_nats::connection::State;
use async_nats::jetstream::{self, context::PublishError};
use async_nats::{Client, ConnectOptions, ServerAddr, Subject};
use async_trait::async_trait;
use futures::future::join_all;
use outbox::redact::redact_text;
use outbox::{Event, Outcome, Publisher, Unavailable};
use tokio::sync::Mutex;
use tokio::time::timeout;

use super::classify::classify;
use super::config::NatsConfig;
use super::message::message;
use crate::broker::answer::Answer;
use crate::broker::publisher::{broker_publisher, connect_within, or_retry, partial_outage};
use crate::{Envelope, Error, Template};

/// The largest message a server takes unless configured otherwise; used
/// until the server has said its own.
const DEFAULT_MAX_PAYLOAD: usize = 1024 * 1024;

/// Publishes events to NATS JetStream.
///
/// * subject: the event's topic override, or [`NatsConfig::subject`];
/// * headers: `Nats-Msg-Id` = event id (JetStream drops a message whose id
///   it has seen within the stream's duplicate window, so a relay's
///   repeats are not stored twice), `outbox-event-id`, `outbox-event-type`,
///   `outbox-aggregate-type`, `outbox-aggregate-id`, then the producer's
///   own (`traceparent`, …);
/// * body: the payload's JSON bytes, as stored.
///
/// An event is [`Outcome::Delivered`] only when the stream's PubAck came
/// back. A call's messages are sent together and their acknowledgements
/// awaited together. The client connects on the first publish or health
/// check and then reconnects by itself in the background; while it is
/// disconnected every publish is [`Unavailable`] at once. See
/// `docs/publishers.md` for how each failure is classified.
pub struct NatsPublisher {
    config: NatsConfig,
    subject: Template,
    options: Options,
    link: Mutex<Option<Link>>,
    /// The last trouble the client reported (disconnect, server error).
    last_event: Arc<StdMutex<Option<String>>>,
    envelope: Envelope,
}

/// Connection settings prepared once, when the publisher is built.
#[derive(Clone)]
struct Options {
    servers: Vec<ServerAddr>,
    credentials: Option<String>,
}

struct Link {
    client: Client,
    js: jetstream::Context,
}

broker_publisher!(NatsPublisher(NatsConfig) {
    /// Messages follow `envelope` (plain by default): with CloudEvents,
    /// binary mode puts the attributes in `ce-*` headers (values
    /// percent-encoded, as in HTTP) with `content-type: application/json`,
    /// structured mode sends the CloudEvent as the body with
    /// `content-type: application/cloudevents+json`; `Nats-Msg-Id` and the
    /// producer's headers (but for ones named `ce-…`) stay.
    fn with_envelope;
    /// A publisher for `nats://HOST:PORT[,HOST:PORT…]` with default settings.
    fn from_url;
});

impl NatsPublisher {
    /// Validates `config` and reads its credentials file, if any. Nothing
    /// is connected until the first publish or health check, so a server
    /// that is down now is not an error here.
    pub fn new(config: NatsConfig) -> Result<Self, Error> {
        config.validate()?;
        let subject = config.destination_template()?;
        let servers = config
            .servers
            .iter()
            .map(|s| {
                format!("nats://{s}").parse::<ServerAddr>().map_err(|e| {
                    Error::invalid(
                        "nats",
                        "servers",
                        s,
                        format!("is not a server address ({e}); use HOST:PORT"),
                    )
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let credentials = match &config.credentials_file {
            None => None,
            Some(path) => {
                let text = std::fs::read_to_string(path).map_err(|e| {
                    Error::invalid(
                        "nats",
                        "credentials_file",
                        path,
                        format!("cannot be read ({e}); name a .creds file as nsc writes it"),
                    )
                })?;
                // Parsed now so that a broken file is a configuration
                // error, not an outage.
                ConnectOptions::with_credentials(&text).map_err(|e| {
                    Error::invalid(
                        "nats",
                        "credentials_file",
                        path,
                        format!(
                            "is not a NATS credentials file ({}); it holds a user JWT and an NKey seed",
                            redact_text(&e.to_string())
                        ),
                    )
                })?;
                Some(text)
            }
        };
        Ok(NatsPublisher {
            config,
            subject,
            options: Options {
                servers,
                credentials,
            },
            link: Mutex::new(None),
            last_event: Arc::new(StdMutex::new(None)),
            envelope: Envelope::plain(),
        })
    }

    fn where_(&self) -> String {
        self.config.where_()
    }

    fn connect_options(&self) -> Result<ConnectOptions, String> {
        let c = &self.config;
        let mut options = match &self.options.credentials {
            Some(text) => ConnectOptions::with_credentials(text)
                .map_err(|e| format!("reading the NATS credentials: {e}"))?,
            None => ConnectOptions::new(),
        };
        if let (Some(user), Some(password)) = (&c.user, &c.password) {
            options = options.user_and_password(user.clone(), password.clone());
        }
        if let Some(token) = &c.token {
            options = options.token(token.clone());
        }
        if c.tls_required {
            options = options.require_tls(true);
        }
        if c.tls_first {
            options = options.tls_first();
        }
        if let Some(ca) = &c.tls_ca_file {
            options = options.add_root_certificates(ca.into());
        }
        if let (Some(cert), Some(key)) = (&c.tls_cert_file, &c.tls_key_file) {
            options = options.add_client_certificate(cert.into(), key.into());
        }
        let last_event = self.last_event.clone();
        Ok(options
            .name(&c.connection_name)
            .connection_timeout(Duration::from_millis(c.connect_timeout_ms))
            .request_timeout(Some(Duration::from_millis(c.ack_timeout_ms)))
            .event_callback(move |event| {
                let last_event = last_event.clone();
                async move {
                    use async_nats::Event as E;
                    let text = match event {
                        E::Connected => None,
                        other => Some(redact_text(&other.to_string())),
                    };
                    *last_event.lock().unwrap_or_else(|e| e.into_inner()) = text;
                }
            }))
    }

    async fn connect(&self) -> Result<Link, String> {
        let options = self.connect_options()?;
        let wait = Duration::from_millis(self.config.connect_timeout_ms);
        // The client's own timeout covers each server; this one the whole
        // list.
        let whole = wait
            * u32::try_from(self.options.servers.len())
                .unwrap_or(1)
                .max(1);
        let client = connect_within(
            "nats",
            &self.where_(),
            whole,
            options.connect(self.options.servers.clone()),
            |text| redact_text(&text),
        )
        .await?;
        let js = jetstream::ContextBuilder::new()
            .timeout(Duration::from_millis(self.config.ack_timeout_ms))
            .build(client.clone());
        Ok(Link { client, js })
    }

    /// The connection, opened if needed; `Err` if it cannot be opened or
    /// is down (the client is reconnecting in the background).
    async fn link(&self) -> Result<(Client, jetstream::Context), Unavailable> {
        let mut guard = self.link.lock().await;
        if guard.is_none() {
            *guard = Some(self.connect().await.map_err(Unavailable::new)?);
        }
        let Some(link) = guard.as_ref() else {
            return Err(Unavailable::new("nats connection missing"));
        };
        if link.client.connection_state() == State::Disconnected {
            return Err(Unavailable::new(self.disconnected()));
        }
        Ok((link.client.clone(), link.js.clone()))
    }

    fn disconnected(&self) -> String {
        let last = self
            .last_event
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        match last {
            Some(why) => format!(
                "nats at {} is disconnected; the client is reconnecting (last: {why})",
                self.where_()
            ),
            None => format!(
                "nats at {} is disconnected; the client is reconnecting",
                self.where_()
            ),
        }
    }
}

#[async_trait]
impl Publisher for NatsPublisher {
    fn name(&self) -> &str {
        "nats"
    }

    fn destination(&self, event: &Event) -> Option<String> {
        self.subject.destination(event).ok().map(Cow::into_owned)
    }

    async fn publish(&self, batch: &[Event]) -> Result<Vec<Outcome>, Unavailable> {
        let (client, js) = self.link().await?;
        let connects = client.statistics().connects.load(Ordering::Relaxed);
        let max_payload = match client.server_info().max_payload {
            0 => DEFAULT_MAX_PAYLOAD,
            n => n,
        };

        // Send the call: each publish is queued on the connection at once;
        // then every acknowledgement is awaited together.
        let mut answers: Vec<Option<Answer>> = vec![None; batch.len()];
        let mut pending = Vec::with_capacity(batch.len());
        for (i, event) in batch.iter().enumerate() {
            let m = match message(event, &self.subject, max_payload, &self.envelope) {
                Ok(m) => m,
                Err(why) => {
                    answers[i] = Some(Answer::Outcome(Outcome::Rejected(why)));
                    continue;
                }
            };
            // Shared, not copied, by the publish and the answer.
            let subject = Subject::from(m.subject);
            let sent = js
                .send_publish(
                    subject.clone(),
                    jetstream::message::PublishMessage::build()
                        .payload(m.payload)
                        .headers(m.headers),
                )
                .await;
            match sent {
                Ok(ack) => pending.push((i, subject, ack)),
                Err(e) => answers[i] = Some(self.answer(Err(e), &subject)),
            }
        }
        let acks = join_all(
            pending
                .into_iter()
                .map(|(i, subject, ack)| async move { (i, subject, ack.await) }),
        )
        .await;
        for (i, subject, result) in acks {
            answers[i] = Some(self.answer(result, &subject));
        }

        // A connection that dropped (or came back) during the call makes
        // every silence an outage, whatever the client reported per
        // message.
        let reconnected = client.statistics().connects.load(Ordering::Relaxed) != connects;
        let down = client.connection_state() != State::Connected;
        let mut outage: Option<String> = None;
        let outcomes: Vec<Option<Outcome>> = answers
            .into_iter()
            .map(|a| match a {
                Some(Answer::Outcome(o)) => Some(o),
                Some(Answer::Transport(why)) => {
                    outage.get_or_insert(why);
                    None
                }
                None => None,
            })
            .collect();
        let Some(mut why) = outage else {
            return Ok(or_retry(outcomes, "nats gave no answer"));
        };
        if down || reconnected {
            why = format!("{why} ({})", self.disconnected());
        }
        partial_outage(outcomes, why)
    }

    async fn health(&self) -> Result<(), Unavailable> {
        let (client, _) = self.link().await?;
        // A round trip: a hung server keeps the connection open but does
        // not answer.
        let wait = Duration::from_millis(self.config.connect_timeout_ms);
        match timeout(wait, client.flush()).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(Unavailable::new(redact_text(&format!(
                "nats at {}: {e}",
                self.where_()
            )))),
            Err(_) => Err(Unavailable::new(format!(
                "nats at {} did not answer within {} ms",
                self.where_(),
                wait.as_millis()
            ))),
        }
    }

    async fn close(&self) {
        if let Some(link) = self.link.lock().await.take() {
            let wait = Duration::from_millis(self.config.connect_timeout_ms);
            let _ = timeout(wait, link.client.flush()).await;
            let _ = timeout(wait, link.client.drain()).await;
        }
    }
}

impl NatsPublisher {
    /// What `result` says; where it happened is only written out for an
    /// error (not once per delivered event).
    fn answer(
        &self,
        result: Result<jetstream::publish::PublishAck, PublishError>,
        subject: &str,
    ) -> Answer {
        if result.is_ok() {
            return classify(result, self.config.no_stream, "");
        }
        let context = format!("at {}, subject {subject:?}", self.where_());
        classify(result, self.config.no_stream, &context)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nats::NatsConfig;
    use crate::test_support::{assert_unreachable_is_an_outage, free_port};

    #[tokio::test]
    async fn unreachable_server_is_an_outage_and_hides_the_password() {
        let port = free_port();
        let p = NatsPublisher::new(NatsConfig {
            connect_timeout_ms: 500,
            ..NatsConfig::from_url(&format!("nats://u:hunter2@127.0.0.1:{port}")).unwrap()
        })
        .unwrap();
        assert_unreachable_is_an_outage(&p, &port.to_string(), &["hunter2"]).await;
    }

    #[test]
    fn an_unreadable_credentials_file_is_a_configuration_error() {
        let e = NatsPublisher::new(NatsConfig {
            credentials_file: Some("/nonexistent/outbox.creds".into()),
            ..NatsConfig::default()
        })
        .unwrap_err();
        assert_eq!(e.field(), Some("credentials_file"));
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bad.creds");
        std::fs::write(&path, "not a creds file").unwrap();
        let e = NatsPublisher::new(NatsConfig {
            credentials_file: Some(path.display().to_string()),
            ..NatsConfig::default()
        })
        .unwrap_err();
        assert!(e.to_string().contains("credentials"), "{e}");
    }
}
