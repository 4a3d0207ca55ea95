//! Settings of the HTTP webhook publisher.

use std::collections::BTreeMap;
use std::fmt;

use outbox::redact::{is_secret_key, redact_text, redact_url, REDACTED};
use serde::Deserialize;

use super::request::{reserved_header, UrlTemplate};
use super::sign::SigningKey;
use crate::broker::settings::{hidden, settings_debug, Settings};
use crate::Error;

/// The prefix of a Standard Webhooks secret: `whsec_` + base64 key.
pub const SECRET_PREFIX: &str = "whsec_";
/// The environment variable the `outbox` program reads the secret from when
/// `[publisher.http]` has none.
pub const SECRET_ENV: &str = "OUTBOX_PUBLISHER_HTTP_SECRET";
/// How long one request may take by default, in milliseconds.
pub const DEFAULT_TIMEOUT_MS: u64 = 10_000;
/// How many requests of a wave are in flight at once by default.
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
    /// How many requests of one wave are in flight at once. Default 16.
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
mod tests {
    use super::*;

    const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

    fn ok() -> HttpConfig {
        HttpConfig::new("https://hooks.example.com/outbox", SECRET)
    }

    #[test]
    fn a_url_and_a_secret_are_enough() {
        ok().validate().unwrap();
        HttpConfig::new(
            "http://127.0.0.1:8080/hooks/{topic}?t={aggregate_type}",
            SECRET,
        )
        .validate()
        .unwrap();
    }

    #[test]
    fn errors_name_field_value_and_fix() {
        let e = HttpConfig {
            secret: None,
            ..ok()
        }
        .validate()
        .unwrap_err();
        assert_eq!(e.field(), Some("secret"));
        assert!(
            e.to_string().contains(SECRET_ENV) && e.to_string().contains("missing"),
            "{e}"
        );
        for url in [
            "",
            "ftp://h/x",
            "http://",
            "http://h:99999/x",
            "http://{event_type}.example.com/",
            "http://h/{aggregate}",
            "not a url",
        ] {
            let e = HttpConfig {
                url: url.into(),
                ..ok()
            }
            .validate()
            .unwrap_err();
            assert_eq!(e.field(), Some("url"), "{url:?}: {e}");
        }
        let e = HttpConfig {
            timeout_ms: 5,
            ..ok()
        }
        .validate()
        .unwrap_err();
        assert!(e.to_string().contains("timeout_ms = 5"), "{e}");
        let e = HttpConfig {
            max_concurrency: 0,
            ..ok()
        }
        .validate()
        .unwrap_err();
        assert_eq!(e.field(), Some("max_concurrency"));
        for (name, value) in [
            ("webhook-signature", "v1,x"),
            ("Content-Type", "text/plain"),
            ("outbox-event-id", "x"),
            ("bad name", "x"),
            ("x-ok", "line\nbreak"),
            ("x-ok", " padded"),
        ] {
            let c = HttpConfig {
                headers: [(name.to_owned(), value.to_owned())].into(),
                ..ok()
            };
            let e = c.validate().unwrap_err();
            assert!(e.field().unwrap().starts_with("headers."), "{name}: {e}");
        }
    }

    #[test]
    fn secrets_never_show() {
        let c = HttpConfig {
            url: "https://u:hunter2@hooks.example.com/x?token=tok3n".into(),
            headers: [
                ("authorization".to_owned(), "Bearer s3cr3t".to_owned()),
                ("x-api-key".to_owned(), "k3y".to_owned()),
                ("x-tenant".to_owned(), "acme".to_owned()),
            ]
            .into(),
            ..ok()
        };
        c.validate().unwrap();
        let shown = format!("{c:?} {c}");
        for secret in ["hunter2", "tok3n", "s3cr3t", "k3y", "MfKQ9r8"] {
            assert!(!shown.contains(secret), "{secret} in {shown}");
        }
        assert!(shown.contains("acme"), "{shown}");
        let bad = HttpConfig {
            secret: Some("whsec_hunter2hunter2".into()),
            ..c.clone()
        };
        let e = bad.validate().unwrap_err().to_string();
        assert!(!e.contains("hunter2"), "{e}");
        let bad = HttpConfig {
            url: "https://u:hunter2@h:99999/".into(),
            ..c.clone()
        };
        let e = bad.validate().unwrap_err().to_string();
        assert!(!e.contains("hunter2"), "{e}");
        let bad = HttpConfig {
            headers: [("authorization".to_owned(), "Bearer s3cr3t\n".to_owned())].into(),
            ..c
        };
        let e = bad.validate().unwrap_err().to_string();
        assert!(!e.contains("s3cr3t"), "{e}");
    }

    #[test]
    fn unknown_fields_are_refused() {
        let e = serde_json::from_str::<HttpConfig>(r#"{"timeout": 5}"#).unwrap_err();
        assert!(e.to_string().contains("timeout"), "{e}");
        let c: HttpConfig =
            serde_json::from_str(r#"{"max_concurrency": 4, "headers": {"x-a": "b"}}"#).unwrap();
        assert_eq!(c.max_concurrency, 4);
        assert_eq!(c.headers["x-a"], "b");
    }
}
