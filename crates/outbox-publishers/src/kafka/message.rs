//! An event as a Kafka message: its headers (the topic comes from the
//! template, the key is the aggregate id, the value the envelope's body).

use outbox::Event;
use rdkafka::message::{Header, OwnedHeaders};

use crate::cloudevents::{Format, KAFKA};
use crate::Envelope;

/// The headers of `event`'s message in `envelope`'s format: the
/// `outbox-*` headers (the event id's under `id_header`) and the
/// producer's but any named `id_header` when plain; with CloudEvents the
/// binding's `ce_*` headers (binary mode), `content-type` and the
/// producer's headers but any named `ce_…`.
pub(super) fn headers(event: &Event, envelope: &Envelope, id_header: &str) -> OwnedHeaders {
    if envelope.is_plain() {
        let mut headers = OwnedHeaders::new_with_capacity(4 + event.headers.len());
        let id = event.id.to_string();
        let identity = event.identity_headers(&id);
        let renamed =
            std::iter::once((id_header, identity[0].1)).chain(identity[1..].iter().copied());
        let own = event
            .headers
            .iter()
            .filter(|(key, _)| key.as_str() != id_header)
            .map(|(key, value)| (key.as_str(), value.as_str()));
        for (key, value) in renamed.chain(own) {
            headers = headers.insert(Header {
                key,
                value: Some(value),
            });
        }
        return headers;
    }
    let mut headers = OwnedHeaders::new_with_capacity(11 + event.headers.len());
    if envelope.format() == Format::CloudEventsBinary {
        envelope.binary_attributes(event, &KAFKA, |key, value| {
            headers = std::mem::take(&mut headers).insert(Header {
                key,
                value: Some(value),
            });
        });
    }
    headers = headers.insert(Header {
        key: "content-type",
        value: Some(envelope.content_type()),
    });
    for (key, value) in &event.headers {
        if Envelope::forwards(&KAFKA, key) {
            headers = headers.insert(Header {
                key,
                value: Some(value.as_str()),
            });
        }
    }
    headers
}
