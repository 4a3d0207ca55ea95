//! The publisher's link to RabbitMQ: connecting, opening a confirm-mode
//! channel (declaring the exchange on it), and closing a link given up.

use std::time::Duration;

use lapin::options::{ConfirmSelectOptions, ExchangeDeclareOptions};
use lapin::types::FieldTable;
use lapin::uri::AMQPUri;
use lapin::{Channel, Connection, ConnectionProperties, ExchangeKind};
use outbox::redact::hide;
use tokio::time::timeout;

use super::config::{redact_url, AmqpConfig, ExchangeType};
use crate::broker::publisher::connect_within;

/// A connection and the confirm-mode channel the publisher sends on.
pub(super) struct Link {
    pub(super) connection: Connection,
    pub(super) channel: Channel,
}

impl Link {
    pub(super) fn usable(&self) -> bool {
        self.connection.status().connected() && self.channel.status().connected()
    }
}

/// What opening a link needs: the settings and the parsed URL. Its
/// messages name the broker by its redacted URL and never quote the
/// password.
pub(super) struct Dialer<'a> {
    pub(super) config: &'a AmqpConfig,
    pub(super) uri: &'a AMQPUri,
}

impl Dialer<'_> {
    /// The broker, as messages name it (password hidden).
    pub(super) fn where_(&self) -> String {
        redact_url(&self.config.url)
    }

    /// Removes the password from `text`, should a client error quote it
    /// (the already redacted URL in it is left alone).
    pub(super) fn scrub(&self, text: String) -> String {
        hide(&text, &self.uri.authority.userinfo.password, &self.where_())
    }

    pub(super) async fn connect(&self) -> Result<Link, String> {
        let wait = Duration::from_millis(self.config.connect_timeout_ms);
        let props = ConnectionProperties::default()
            .with_connection_name(self.config.connection_name.clone().into());
        let connection = connect_within(
            "rabbitmq",
            &self.where_(),
            wait,
            Connection::connect_uri(self.uri.clone(), props),
            |text| self.scrub(text),
        )
        .await?;
        let channel = match timeout(wait, self.open_channel(&connection)).await {
            Err(_) => Err(format!(
                "opening a channel on {} timed out after {} ms",
                self.where_(),
                wait.as_millis()
            )),
            Ok(r) => r,
        };
        match channel {
            Ok(channel) => Ok(Link {
                connection,
                channel,
            }),
            Err(e) => {
                let _ = timeout(wait, connection.close(200, "setup failed".into())).await;
                Err(e)
            }
        }
    }

    pub(super) async fn open_channel(&self, connection: &Connection) -> Result<Channel, String> {
        let channel = connection
            .create_channel()
            .await
            .map_err(|e| self.scrub(format!("opening a channel on {}: {e}", self.where_())))?;
        channel
            .confirm_select(ConfirmSelectOptions::default())
            .await
            .map_err(|e| {
                self.scrub(format!(
                    "enabling publisher confirms on {}: {e}",
                    self.where_()
                ))
            })?;
        if self.config.declare_exchange {
            let kind = match self.config.exchange_type {
                ExchangeType::Topic => ExchangeKind::Topic,
                ExchangeType::Direct => ExchangeKind::Direct,
                ExchangeType::Fanout => ExchangeKind::Fanout,
                ExchangeType::Headers => ExchangeKind::Headers,
            };
            channel
                .exchange_declare(
                    self.config.exchange.as_str().into(),
                    kind,
                    ExchangeDeclareOptions {
                        durable: true,
                        ..ExchangeDeclareOptions::default()
                    },
                    FieldTable::default(),
                )
                .await
                .map_err(|e| {
                    self.scrub(format!(
                        "declaring exchange {:?} ({:?}, durable) on {}: {e}; if it exists with other settings, \
                         match them in the config or set declare_exchange = false",
                        self.config.exchange,
                        self.config.exchange_type,
                        self.where_()
                    ))
                })?;
        }
        Ok(channel)
    }
}

/// Closes a connection that is being given up, if it still lives.
pub(super) async fn close_quietly(link: Option<Link>) {
    if let Some(link) = link {
        if link.connection.status().connected() {
            let _ = timeout(
                Duration::from_millis(500),
                link.connection.close(200, "reconnecting".into()),
            )
            .await;
        }
    }
}
