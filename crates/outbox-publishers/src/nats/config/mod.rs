//! Settings of the NATS JetStream publisher.

use std::fmt;

use outbox::redact::{redact_url, REDACTED};
use serde::{Deserialize, Serialize};

use crate::broker::settings::{hidden, settings_debug, Settings};
use crate::{Error, Template};

/// The default subject template.
pub const DEFAULT_SUBJECT: &str = "outbox.{aggregate_type}.{event_type}";

/// The NATS client port.
pub const DEFAULT_PORT: u16 = 4222;

/// What to do when no JetStream stream captures an event's subject (the
/// server answers the publish with "no responders").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum NoStream {
    /// Retry with backoff (default): an operator may be creating the
    /// stream; the event waits (holding back only its own aggregate) and is
    /// dead-lettered after the relay's `max_attempts` if nobody does.
    #[default]
    Retry,
    /// Dead-letter at once: for setups where a subject without a stream is
    /// a bug.
    Reject,
}

/// Settings of [`crate::nats::NatsPublisher`].
///
/// ```
/// use outbox_publishers::nats::NatsConfig;
/// let config = NatsConfig::from_url("nats://app:secret@127.0.0.1:4222,10.0.0.2:4222").unwrap();
/// assert_eq!(config.servers, ["127.0.0.1:4222", "10.0.0.2:4222"]);
/// assert_eq!(config.user.as_deref(), Some("app"));
/// assert!(!format!("{config:?}").contains("secret"));
/// ```
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct NatsConfig {
    /// The servers to connect to, `HOST:PORT` each (the client picks one
    /// and fails over to the others). Default `["127.0.0.1:4222"]`.
    pub servers: Vec<String>,
    /// Subject of an event without a topic override: a [`Template`].
    /// Default `outbox.{aggregate_type}.{event_type}`.
    pub subject: String,
    /// What to do when no stream captures the subject. Default `retry`.
    pub no_stream: NoStream,
    /// User name, with [`NatsConfig::password`].
    pub user: Option<String>,
    /// Password of [`NatsConfig::user`]; never shown.
    pub password: Option<String>,
    /// An authentication token; never shown.
    pub token: Option<String>,
    /// A `.creds` file (a user JWT and its NKey seed, as `nsc` writes
    /// it), read when the publisher is built.
    pub credentials_file: Option<String>,
    /// Refuse to talk to a server without TLS. Default `false` (the client
    /// still uses TLS when the server asks for it).
    pub tls_required: bool,
    /// PEM file of CA certificates to trust besides the system's.
    pub tls_ca_file: Option<String>,
    /// PEM client certificate, with [`NatsConfig::tls_key_file`], for
    /// servers that verify clients.
    pub tls_cert_file: Option<String>,
    /// PEM private key of [`NatsConfig::tls_cert_file`].
    pub tls_key_file: Option<String>,
    /// Start TLS before the server's greeting (servers with
    /// `handshake_first`). Default `false`.
    pub tls_first: bool,
    /// How long to wait for the JetStream acknowledgement (PubAck) of a
    /// message. Keep it below the relay's `publish_timeout_ms`. Default
    /// 10000.
    pub ack_timeout_ms: u64,
    /// How long connecting (TCP, TLS, handshake) may take. Default 5000.
    pub connect_timeout_ms: u64,
    /// The connection name the server shows in its monitoring. Default
    /// `outbox-relay`.
    pub connection_name: String,
}

impl Default for NatsConfig {
    fn default() -> Self {
        NatsConfig {
            servers: vec![format!("127.0.0.1:{DEFAULT_PORT}")],
            subject: DEFAULT_SUBJECT.to_owned(),
            no_stream: NoStream::Retry,
            user: None,
            password: None,
            token: None,
            credentials_file: None,
            tls_required: false,
            tls_ca_file: None,
            tls_cert_file: None,
            tls_key_file: None,
            tls_first: false,
            ack_timeout_ms: 10_000,
            connect_timeout_ms: 5_000,
            connection_name: "outbox-relay".to_owned(),
        }
    }
}

settings_debug!(NatsConfig {
    servers, subject, no_stream, user, password => hidden, token => hidden, credentials_file,
    tls_required, tls_ca_file, tls_cert_file, tls_key_file, tls_first,
    ack_timeout_ms, connect_timeout_ms, connection_name,
});

impl fmt::Display for NatsConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} subject {}", self.where_(), self.subject)
    }
}

/// The checks of these settings, their errors naming `nats`.
const NATS: Settings = Settings::of("nats");

impl NatsConfig {
    /// Settings for `nats://[USER:PASS@|TOKEN@]HOST:PORT[,HOST:PORT…]`,
    /// every other field at its default. Credentials in the URL set
    /// [`NatsConfig::user`] and [`NatsConfig::password`] (or
    /// [`NatsConfig::token`] when there is no `:`); the port defaults to
    /// 4222.
    pub fn from_url(url: &str) -> Result<Self, Error> {
        let mut config = NatsConfig::default();
        config.apply_url(url)?;
        config.validate()?;
        Ok(config)
    }

    /// Takes the servers (and credentials, if any) from `url`, keeping
    /// every other field: the spec's address wins over a config file's.
    pub fn apply_url(&mut self, url: &str) -> Result<(), Error> {
        let shown = redact_url(url);
        let form = "use nats://HOST:PORT[,HOST:PORT…] (credentials as nats://USER:PASS@HOST:PORT \
                    or in [publisher.nats])";
        let Some(rest) = url.strip_prefix("nats://") else {
            return Err(NATS.invalid("url", shown, format!("must start with nats://; {form}")));
        };
        if rest.contains(['/', '?', '#']) {
            return Err(NATS.invalid(
                "url",
                shown,
                format!("takes only servers and credentials; {form}; set other options in the config file"),
            ));
        }
        let (userinfo, hosts) = match rest.rsplit_once('@') {
            Some((userinfo, hosts)) => (Some(userinfo), hosts),
            None => (None, rest),
        };
        if let Some(userinfo) = userinfo {
            let decode = |s: &str| {
                percent_decode(s).ok_or_else(|| {
                    NATS.invalid(
                        "url",
                        &shown,
                        "has credentials that are not valid percent-encoded UTF-8",
                    )
                })
            };
            match userinfo.split_once(':') {
                Some((user, password)) => {
                    self.user = Some(decode(user)?);
                    self.password = Some(decode(password)?);
                    self.token = None;
                }
                None => {
                    self.token = Some(decode(userinfo)?);
                    self.user = None;
                    self.password = None;
                }
            }
        }
        self.servers = hosts
            .split(',')
            .map(|h| {
                let h = h.trim();
                if h.rsplit_once(':').is_some_and(|(_, p)| !p.contains(']')) {
                    h.to_owned()
                } else {
                    format!("{h}:{DEFAULT_PORT}")
                }
            })
            .collect();
        Ok(())
    }

    /// The servers, for messages: `nats://HOST:PORT,HOST:PORT` (never a
    /// credential).
    pub(crate) fn where_(&self) -> String {
        format!("nats://{}", self.servers.join(","))
    }

    /// `subject`, parsed, or why it cannot make subjects.
    pub(crate) fn destination_template(&self) -> Result<Template, Error> {
        Template::setting("nats", "subject", &self.subject, |subject| {
            check_subject(subject)
                .map_err(|why| format!("{why}; e.g. outbox.{{aggregate_type}}.{{event_type}}"))
        })
    }

    /// Checks every field; the error names the field, its value and the fix.
    pub fn validate(&self) -> Result<(), Error> {
        NATS.host_ports(
            "servers",
            &self.servers,
            ("server", "127.0.0.1:4222"),
            |host| {
                !host.contains([',', ' ', '/', '@', '?', '#'])
                    && !host.chars().any(char::is_control)
            },
            redact_url,
        )?;
        self.destination_template()?;
        let logins = [
            self.user.is_some() || self.password.is_some(),
            self.token.is_some(),
            self.credentials_file.is_some(),
        ];
        if logins.iter().filter(|set| **set).count() > 1 {
            // Named by the setting that comes on top of another.
            let (field, value) = match &self.credentials_file {
                Some(path) => ("credentials_file", path.as_str()),
                None => ("token", REDACTED),
            };
            return Err(NATS.invalid(
                field,
                value,
                "set one way to log in: user and password, token, or credentials_file",
            ));
        }
        match (&self.user, &self.password) {
            (Some(user), None) => {
                return Err(NATS.invalid(
                    "password",
                    "(unset)",
                    format!("user {user:?} needs a password"),
                ))
            }
            (None, Some(_)) => {
                return Err(NATS.invalid("user", "(unset)", "a password needs a user"))
            }
            (Some(user), Some(_)) if user.is_empty() => {
                return Err(NATS.invalid(
                    "user",
                    "\"\"",
                    "name the user, or remove user and password",
                ))
            }
            _ => {}
        }
        if self.token.as_deref() == Some("") {
            return Err(NATS.invalid("token", "\"\"", "set a token, or remove the setting"));
        }
        for (field, path) in [
            ("credentials_file", &self.credentials_file),
            ("tls_ca_file", &self.tls_ca_file),
            ("tls_cert_file", &self.tls_cert_file),
            ("tls_key_file", &self.tls_key_file),
        ] {
            if path.as_deref().is_some_and(|p| p.trim().is_empty()) {
                return Err(NATS.invalid(field, "\"\"", "name a file, or remove the setting"));
            }
        }
        if self.tls_cert_file.is_some() != self.tls_key_file.is_some() {
            let (field, other) = if self.tls_cert_file.is_some() {
                ("tls_key_file", "tls_cert_file")
            } else {
                ("tls_cert_file", "tls_key_file")
            };
            return Err(NATS.invalid(
                field,
                "(unset)",
                format!(
                    "{other} is set: a client certificate needs both the certificate and its key"
                ),
            ));
        }
        NATS.publish_timeout("ack_timeout_ms", self.ack_timeout_ms, 100..=3_600_000)?;
        NATS.connect_timeout("connect_timeout_ms", self.connect_timeout_ms)?;
        if self.connection_name.chars().any(char::is_control) || self.connection_name.len() > 255 {
            return Err(NATS.invalid(
                "connection_name",
                format!("{:?}", self.connection_name),
                "use at most 255 bytes without control characters",
            ));
        }
        Ok(())
    }
}

/// Why `subject` cannot be published to, if it cannot: NATS subjects are
/// non-empty tokens separated by `.`, without whitespace, and a publish
/// subject may not contain the wildcards `*` and `>`.
pub(crate) fn check_subject(subject: &str) -> Result<(), String> {
    if subject.is_empty() {
        return Err("a subject cannot be empty".into());
    }
    if subject.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err("a subject cannot contain whitespace or control characters".into());
    }
    for token in subject.split('.') {
        if token.is_empty() {
            return Err(
                "a subject cannot have empty tokens (a leading, trailing or double '.')".into(),
            );
        }
        if token == "*" || token == ">" {
            return Err("a subject to publish to cannot contain the wildcards * and >".into());
        }
    }
    Ok(())
}

/// `%XX` decoding of URL credentials; `None` if not valid UTF-8 after it.
fn percent_decode(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests;
