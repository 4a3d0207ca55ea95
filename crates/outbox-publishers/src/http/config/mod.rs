//! Settings of the HTTP webhook publisher.

use std::collections::BTreeMap;
use std::fmt;

use outbox::redact::{is_secret_key, redact_text, redact_url, REDACTED};
use serde::Deserialize;

use super::message::{reserved_header, UrlTemplate};
use super::sign::{SigningKey, SECRET_PREFIX};
use crate::broker::settings::{hidden, settings_debug, Settings};
use crate::Error;

/// The environment variable the `outbox` program reads the secret from when
/// `[publisher.http]` has none.
pub const SECRET_ENV: &str = "OUTBOX_PUBLISHER_HTTP_SECRET";
/// How long one request may take by default, in milliseconds.
pub const DEFAULT_TIMEOUT_MS: u64 = 10_000;
/// How many requests are in flight at once by default.
pub const DEFAULT_MAX_CONCURRENCY: usize = 16;

/// Settings of [`crate::http::HttpPublisher`].
///
/// ```
/// use outbox_publishers::http::HttpConfig;
/// let config = HttpConfig::new(
///     "https://hooks.example.com/outbox",
///     "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
/// );
/// config.validate().unwrap();
/// assert!(!format!("{config:?}").contains("MfKQ9r8"));
/// ```
#[derive(Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HttpConfig {
    /// The endpoint every event is POSTed to: `http://…` or `https://…`
    /// (TLS with the system's CA certificates). Its path and query may hold
    /// the placeholders of a [`crate::Template`] and `{topic}` (the event's
    /// topic override, or its event type when it has none), each filled in
    /// percent-encoded. A password in it is never shown.
    pub url: String,
    /// The signing secret: `whsec_` followed by the base64 of 24 to 64
    /// random bytes. Required; never shown in `Debug`, errors or logs.
    pub secret: Option<String>,
    /// How long one request may take, from connecting to the end of the
    /// answer, in milliseconds; a request that takes longer is an outage
    /// (nothing is counted against the event). Keep it below the relay's
    /// `publish_timeout_ms`. Default 10000.
    pub timeout_ms: u64,
    /// How many requests are in flight at once (the relay's publish calls, one event each). Default 16.
    pub max_concurrency: usize,
    /// Extra headers sent with every request (e.g. `authorization`). Values
    /// of headers whose name says they are secret are never shown.
    pub headers: BTreeMap<String, String>,
}

impl Default for HttpConfig {
    fn default() -> Self {
        HttpConfig {
            url: String::new(),
            secret: None,
            timeout_ms: DEFAULT_TIMEOUT_MS,
            max_concurrency: DEFAULT_MAX_CONCURRENCY,
            headers: BTreeMap::new(),
        }
    }
}

/// A header value as settings may show it.
fn shown_header(name: &str, value: &str) -> String {
    if is_secret_key(name) || name.eq_ignore_ascii_case("cookie") {
        REDACTED.to_owned()
    } else {
        redact_text(value)
    }
}

/// `headers` as `Debug` shows them: secrets' values redacted.
fn shown_headers(headers: &BTreeMap<String, String>) -> BTreeMap<&str, String> {
    headers
        .iter()
        .map(|(k, v)| (k.as_str(), shown_header(k, v)))
        .collect()
}

settings_debug!(HttpConfig {
    url => redact_url, secret => hidden, timeout_ms, max_concurrency, headers => shown_headers,
});

impl fmt::Display for HttpConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "POST {}", redact_url(&self.url))
    }
}

/// The checks of these settings, their errors naming `http`.
const HTTP: Settings = Settings::of("http");

impl HttpConfig {
    /// Settings for `url` signed with `secret`, every other field at its
    /// default.
    pub fn new(url: impl Into<String>, secret: impl Into<String>) -> Self {
        HttpConfig {
            url: url.into(),
            secret: Some(secret.into()),
            ..HttpConfig::default()
        }
    }

    /// The parsed URL template.
    pub(crate) fn template(&self) -> Result<UrlTemplate, Error> {
        UrlTemplate::parse(&self.url).map_err(|fix| HTTP.invalid("url", redact_url(&self.url), fix))
    }

    /// The signing key.
    pub(crate) fn key(&self) -> Result<SigningKey, Error> {
        match &self.secret {
            // The value is shown as *** like any secret's, so the fix
            // says that it is missing.
            None => Err(HTTP.invalid(
                "secret",
                REDACTED,
                format!(
                    "missing: webhooks are signed, set secret in [publisher.http] or {SECRET_ENV} to {SECRET_PREFIX} followed by a base64 key, e.g. {SECRET_PREFIX}$(openssl rand -base64 32)"
                ),
            )),
            Some(secret) => SigningKey::parse(secret).map_err(|fix| HTTP.invalid("secret", REDACTED, fix)),
        }
    }

    /// Checks every field; the error names the field, its value (secrets
    /// hidden) and the fix.
    pub fn validate(&self) -> Result<(), Error> {
        self.template()?;
        self.key()?;
        HTTP.publish_timeout("timeout_ms", self.timeout_ms, 100..=600_000)?;
        HTTP.within(
            "max_concurrency",
            self.max_concurrency,
            1..=1024,
            "use 1 to 1024",
        )?;
        for (name, value) in &self.headers {
            let field = format!("headers.{name}");
            if reqwest::header::HeaderName::from_bytes(name.as_bytes()).is_err() {
                return Err(HTTP.invalid(
                    redact_text(&field),
                    shown_header(name, value),
                    "a header name is a token: letters, digits and !#$%&'*+-.^_`|~, no spaces",
                ));
            }
            if reserved_header(name) {
                return Err(HTTP.invalid(
                    &field,
                    shown_header(name, value),
                    "the publisher sets this header itself (content, signature, identity or connection headers); remove it",
                ));
            }
            if reqwest::header::HeaderValue::from_str(value).is_err() || value.trim() != value {
                return Err(HTTP.invalid(
                    &field,
                    shown_header(name, value),
                    "use printable ASCII without leading or trailing spaces (no line breaks or control characters)",
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
