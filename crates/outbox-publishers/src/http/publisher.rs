//! The webhook publisher: one signed POST per event, a call's requests in
//! parallel; an event is delivered when the endpoint answers 2xx.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use futures::StreamExt;
use outbox::redact::redact_url;
use outbox::{Event, Outcome, Publisher, Unavailable};
use reqwest::header::{HeaderMap, HeaderName, HeaderValue, CONTENT_TYPE, RETRY_AFTER};
use reqwest::{Client, Url};

use super::classify::{outcome, retry_after, transport_error, QUOTED_BODY_BYTES};
use super::config::HttpConfig;
use super::message::{cloudevent_headers, event_headers, UrlTemplate};
use super::sign::{sign, SigningKey};
use crate::broker::publisher::broker_publisher;
use crate::cloudevents::Format;
use crate::{Envelope, Error};

/// How much of an answer's body is read (so the connection can be used
/// again); the rest is dropped with the connection.
const READ_BODY_BYTES: usize = 64 * 1024;

/// Posts each event to a webhook endpoint, signed per Standard Webhooks.
///
/// * URL: [`HttpConfig::url`], its placeholders filled in;
/// * body: the payload's JSON, byte for byte as stored, with
///   `content-type: application/json`;
/// * `webhook-id` = event id, `webhook-timestamp` = Unix seconds at
///   sending, `webhook-signature` = `v1,` + base64 HMAC-SHA256 of
///   `{id}.{timestamp}.{body}`;
/// * `outbox-event-id`, `outbox-event-type`, `outbox-aggregate-type`,
///   `outbox-aggregate-id`, `outbox-topic` (for a topic override), then
///   the producer's headers and [`HttpConfig::headers`].
///
/// Up to [`HttpConfig::max_concurrency`] requests run at a time.
/// 2xx is [`Outcome::Delivered`]; 408, 425, 429 and 5xx are retried (no
/// sooner than `Retry-After`); other 4xx are rejections; no answer is an
/// outage. See `docs/publishers.md`.
pub struct HttpPublisher {
    config: HttpConfig,
    template: UrlTemplate,
    key: SigningKey,
    headers: HeaderMap,
    client: Client,
    envelope: Envelope,
}

broker_publisher!(HttpPublisher(HttpConfig) {
    /// Requests follow `envelope` (plain by default): with CloudEvents,
    /// binary mode sends the attributes as `ce-*` headers (values
    /// percent-encoded) with `Content-Type: application/json` instead of
    /// the `outbox-*` headers; structured mode posts the CloudEvent with
    /// `Content-Type: application/cloudevents+json`. The signature covers
    /// the body that is sent.
    fn with_envelope;
});

/// What one request came to.
enum Sent {
    /// The endpoint answered.
    Answered(Outcome),
    /// No answer: refused, reset, timed out, TLS failure.
    NoAnswer(String),
    /// Not sent, because another request of the call got no answer.
    Skipped,
}

impl HttpPublisher {
    /// Validates `config` and builds the HTTP client. Nothing is connected
    /// until the first publish or health check, so an endpoint that is
    /// down now is not an error here.
    pub fn new(config: HttpConfig) -> Result<Self, Error> {
        config.validate()?;
        let template = config.template()?;
        let key = config.key()?;
        let mut headers = HeaderMap::new();
        for (name, value) in &config.headers {
            // validate() checked both.
            if let (Ok(n), Ok(v)) = (
                HeaderName::from_bytes(name.as_bytes()),
                HeaderValue::from_str(value),
            ) {
                let mut v = v;
                v.set_sensitive(outbox::redact::is_secret_key(name));
                headers.append(n, v);
            }
        }
        let client = Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(Duration::from_millis(config.timeout_ms))
            .connect_timeout(Duration::from_millis(config.timeout_ms))
            .pool_max_idle_per_host(config.max_concurrency)
            .tcp_nodelay(true)
            .user_agent(concat!("outbox-relay/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| Error::Client {
                broker: "http",
                message: outbox::redact::redact_text(&e.to_string()),
            })?;
        Ok(HttpPublisher {
            config,
            template,
            key,
            headers,
            client,
            envelope: Envelope::plain(),
        })
    }

    /// `POST URL` as messages show it, password hidden.
    fn target(url: &Url) -> String {
        format!("POST {}", redact_url(url.as_str()))
    }

    /// The request for `event`, or why it can never be sent.
    fn prepare(&self, event: &Event) -> Result<(Url, HeaderMap), String> {
        let url = self.template.url_for(event)?;
        let headers = if self.envelope.is_plain() {
            event_headers(event, &self.headers)?
        } else {
            cloudevent_headers(event, &self.headers, &self.envelope)?
        };
        Ok((url, headers))
    }
}

/// One request of a call, prepared: everything but the timestamp and the
/// signature, which are made when it is sent.
struct Request {
    /// The event's index in the call.
    i: usize,
    url: Url,
    headers: HeaderMap,
    id: String,
    body: String,
}

/// Sends one signed request and reads the start of its answer. The
/// `POST URL` an error names is only written out for an error.
async fn send(
    client: &Client,
    key: &SigningKey,
    request: Request,
    content_type: &'static str,
    timeout_ms: u64,
) -> Sent {
    let Request {
        url,
        mut headers,
        id,
        body,
        ..
    } = request;
    let target = url.clone();
    let timestamp = chrono::Utc::now().timestamp();
    let signature = sign(key, &id, timestamp, body.as_bytes());
    headers.insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    for (name, value) in [
        ("webhook-id", id),
        ("webhook-timestamp", timestamp.to_string()),
        ("webhook-signature", signature),
    ] {
        if let Ok(value) = HeaderValue::try_from(value) {
            headers.insert(HeaderName::from_static(name), value);
        }
    }
    let response = match client.post(url).headers(headers).body(body).send().await {
        Ok(r) => r,
        Err(e) => {
            return Sent::NoAnswer(transport_error(
                &HttpPublisher::target(&target),
                e,
                timeout_ms,
            ))
        }
    };
    let status = response.status();
    if status.is_success() {
        // Read to its end so that the connection is used again.
        let mut response = response;
        let mut read = 0;
        while read < READ_BODY_BYTES {
            match response.chunk().await {
                Ok(Some(chunk)) => read += chunk.len(),
                Ok(None) | Err(_) => break,
            }
        }
        return Sent::Answered(Outcome::Delivered);
    }
    let hint = response
        .headers()
        .get(RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| retry_after(v, SystemTime::now()));
    // The status is the answer: a body that breaks off or is slow changes
    // nothing but what the error quotes.
    let mut response = response;
    let mut body = Vec::new();
    while body.len() < READ_BODY_BYTES {
        match response.chunk().await {
            Ok(Some(chunk)) => {
                if body.len() < QUOTED_BODY_BYTES {
                    body.extend_from_slice(&chunk[..chunk.len().min(QUOTED_BODY_BYTES)]);
                }
                if chunk.len() >= READ_BODY_BYTES {
                    break;
                }
            }
            Ok(None) | Err(_) => break,
        }
    }
    Sent::Answered(outcome(
        &HttpPublisher::target(&target),
        status,
        hint,
        &body,
    ))
}

#[async_trait]
impl Publisher for HttpPublisher {
    fn name(&self) -> &str {
        "http"
    }

    /// One request per event: the relay keeps up to `max_concurrency` in
    /// flight, each aggregate's next event sent as soon as its previous
    /// one is answered.
    fn concurrent_calls(&self) -> usize {
        self.config.max_concurrency
    }

    async fn publish(&self, batch: &[Event]) -> Result<Vec<Outcome>, Unavailable> {
        let mut outcomes: Vec<Option<Outcome>> = vec![None; batch.len()];
        let mut requests = Vec::with_capacity(batch.len());
        for (i, event) in batch.iter().enumerate() {
            let (url, headers) = match self.prepare(event) {
                Ok(r) => r,
                Err(why) => {
                    outcomes[i] = Some(Outcome::Rejected(why));
                    continue;
                }
            };
            let body = match self.envelope.format() {
                Format::CloudEventsStructured => String::from_utf8(self.envelope.structured(event))
                    .expect("serde_json writes UTF-8"),
                _ => event.payload.clone(),
            };
            requests.push(Request {
                i,
                url,
                headers,
                id: event.id.to_string(),
                body,
            });
        }
        // Up to max_concurrency requests in flight, on this task: the
        // client's connections do the I/O on their own tasks, so nothing is
        // spawned per request. Set by the first request that gets no
        // answer: the rest of the call is not sent (an endpoint that is down
        // would otherwise cost timeout_ms per request).
        let down = AtomicBool::new(false);
        let (content_type, timeout_ms) = (self.envelope.content_type(), self.config.timeout_ms);
        let mut sent = futures::stream::iter(requests)
            .map(|request| {
                let down = &down;
                async move {
                    let i = request.i;
                    if down.load(Ordering::Relaxed) {
                        return (i, Sent::Skipped);
                    }
                    let sent =
                        send(&self.client, &self.key, request, content_type, timeout_ms).await;
                    if matches!(sent, Sent::NoAnswer(_)) {
                        down.store(true, Ordering::Relaxed);
                    }
                    (i, sent)
                }
            })
            .buffer_unordered(self.config.max_concurrency);
        let mut answered = false;
        let mut first_failure: Option<String> = None;
        let mut unanswered = Vec::new();
        while let Some((i, sent)) = sent.next().await {
            match sent {
                Sent::Answered(o) => {
                    answered = true;
                    outcomes[i] = Some(o);
                }
                Sent::NoAnswer(why) => {
                    first_failure.get_or_insert(why);
                    unanswered.push(i);
                }
                Sent::Skipped => unanswered.push(i),
            }
        }
        if let Some(why) = first_failure {
            if !answered {
                return Err(Unavailable::new(why));
            }
            for i in unanswered {
                outcomes[i] = Some(Outcome::Unavailable(why.clone()));
            }
        }
        Ok(outcomes
            .into_iter()
            .map(|o| {
                o.unwrap_or_else(|| Outcome::Unavailable("http request was not sent".to_owned()))
            })
            .collect())
    }

    /// A `HEAD` of the URL up to its first placeholder: any answer, of any
    /// status, means the endpoint is reachable.
    async fn health(&self) -> Result<(), Unavailable> {
        let url = self.template.base().clone();
        let target = format!("HEAD {}", redact_url(url.as_str()));
        match self
            .client
            .head(url)
            .headers(self.headers.clone())
            .send()
            .await
        {
            Ok(_) => Ok(()),
            Err(e) => Err(Unavailable::new(transport_error(
                &target,
                e,
                self.config.timeout_ms,
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{assert_unreachable_is_an_outage, free_port};

    const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

    fn event() -> Event {
        crate::test_support::event("1", &[])
    }

    #[tokio::test]
    async fn unreachable_endpoint_is_an_outage_and_hides_the_secrets() {
        let port = free_port();
        let p = HttpPublisher::new(HttpConfig::new(
            format!("http://u:hunter2@127.0.0.1:{port}/hook?token=t0ken"),
            SECRET,
        ))
        .unwrap();
        let secrets = ["hunter2", "t0ken", "MfKQ9r8"];
        let h = assert_unreachable_is_an_outage(&p, &port.to_string(), &secrets).await;
        assert!(h.message.contains("HEAD"), "{h}");
    }

    #[tokio::test]
    async fn an_event_http_cannot_carry_is_rejected_alone() {
        let p = HttpPublisher::new(HttpConfig::new("http://127.0.0.1:9/hook", SECRET)).unwrap();
        let mut bad = event();
        bad.headers.insert("x-bad".into(), "a\r\nb".into());
        let outcomes = p.publish(&[bad]).await.unwrap();
        assert!(
            matches!(&outcomes[0], Outcome::Rejected(why) if why.contains("x-bad")),
            "{outcomes:?}"
        );
    }
}
