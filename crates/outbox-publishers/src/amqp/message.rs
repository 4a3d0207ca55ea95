//! An event as an AMQP message: routing key, properties, headers and body,
//! or why it can never be sent.

use lapin::types::{AMQPValue, FieldTable, LongString, ShortString};
use lapin::BasicProperties;
use outbox::redact::shorten;
use outbox::Event;

use super::publisher::AmqpPublisher;
use crate::cloudevents::{Format, AMQP};
use crate::Envelope;

/// AMQP `delivery_mode` of a persistent message.
const PERSISTENT: u8 = 2;

impl AmqpPublisher {
    /// The message for `event`: routing key, properties and, when it is not
    /// the payload itself (structured CloudEvents), the body; or why it can
    /// never be sent.
    #[allow(clippy::type_complexity)]
    pub(super) fn message(
        &self,
        event: &Event,
    ) -> Result<(ShortString, BasicProperties, Option<Vec<u8>>), String> {
        let key = self.routing_key.destination(event)?;
        if key.len() > 255 {
            return Err(format!(
                "routing key {:?} is {} bytes long; AMQP allows 255",
                shorten(&key, 40),
                key.len()
            ));
        }
        let routing_key = ShortString::from(key.into_owned());
        let body = match self.envelope.format() {
            Format::CloudEventsStructured => Some(self.envelope.structured(event)),
            _ => None,
        };
        let size = body.as_ref().map_or(event.payload.len(), Vec::len);
        if size > self.config.max_message_bytes {
            return Err(format!(
                "message of {size} bytes is larger than max_message_bytes ({})",
                self.config.max_message_bytes
            ));
        }
        let mut headers = FieldTable::default();
        let mut insert = |name: &str, value: &str| -> Result<(), String> {
            let name = ShortString::try_new(name.to_owned()).map_err(|_| {
                format!("header name {name:?} is longer than 255 bytes, which AMQP does not allow")
            })?;
            headers.insert(name, AMQPValue::LongString(LongString::from(value)));
            Ok(())
        };
        if self.envelope.is_plain() {
            for (name, value) in event.message_headers() {
                insert(&name, &value)?;
            }
        } else {
            if self.envelope.format() == Format::CloudEventsBinary {
                // The attribute names are short: they always fit.
                self.envelope
                    .binary_attributes(event, &AMQP, |name, value| {
                        let _ = insert(name, value);
                    });
            }
            for (name, value) in &event.headers {
                if Envelope::forwards(&AMQP, name) {
                    insert(name, value)?;
                }
            }
        }
        let mut props = BasicProperties::default()
            .with_content_type(self.envelope.content_type().into())
            .with_delivery_mode(PERSISTENT)
            .with_message_id(event.id.to_string().into())
            .with_headers(headers);
        if let Ok(kind) = ShortString::try_new(event.event_type.clone()) {
            props = props.with_type(kind);
        }
        if let Ok(ts) = u64::try_from(event.created_at.timestamp()) {
            props = props.with_timestamp(ts);
        }
        Ok((routing_key, props, body))
    }
}
