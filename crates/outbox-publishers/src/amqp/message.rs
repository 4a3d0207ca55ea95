//! An event as an AMQP message: routing key, properties and headers, or
//! why it can never be sent.

use lapin::types::{AMQPValue, FieldTable, LongString, ShortString};
use lapin::BasicProperties;
use outbox::Event;

use super::publisher::AmqpPublisher;

/// AMQP `delivery_mode` of a persistent message.
const PERSISTENT: u8 = 2;

impl AmqpPublisher {
    /// The message for `event`, or why it can never be sent.
    pub(super) fn message(&self, event: &Event) -> Result<(ShortString, BasicProperties), String> {
        let key = event.destination(&self.config.routing_key_template);
        let routing_key = ShortString::try_new(key.clone()).map_err(|_| {
            format!(
                "routing key {:?}… is {} bytes long; AMQP allows 255",
                key.chars().take(40).collect::<String>(),
                key.len()
            )
        })?;
        if event.payload.len() > self.config.max_message_bytes {
            return Err(format!(
                "message of {} bytes is larger than max_message_bytes ({})",
                event.payload.len(),
                self.config.max_message_bytes
            ));
        }
        let mut headers = FieldTable::default();
        for (name, value) in event.message_headers() {
            let name = ShortString::try_new(name.clone()).map_err(|_| {
                format!("header name {name:?} is longer than 255 bytes, which AMQP does not allow")
            })?;
            headers.insert(name, AMQPValue::LongString(LongString::from(value)));
        }
        let mut props = BasicProperties::default()
            .with_content_type("application/json".into())
            .with_delivery_mode(PERSISTENT)
            .with_message_id(event.id.to_string().into())
            .with_headers(headers);
        if let Ok(kind) = ShortString::try_new(event.event_type.clone()) {
            props = props.with_type(kind);
        }
        if let Ok(ts) = u64::try_from(event.created_at.timestamp()) {
            props = props.with_timestamp(ts);
        }
        Ok((routing_key, props))
    }
}
