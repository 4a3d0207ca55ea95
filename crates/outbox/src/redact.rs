//! Hiding secrets in what the outbox prints: errors, logs, `config check`.
//!
//! One place decides what a secret looks like, so that every output path
//! hides the same things:
//!
//! - the password of a URL's userinfo (`postgres://app:PASSWORD@host/db`,
//!   `amqps://…`, `kafka://…`, `redis://:PASSWORD@…`, `http://…`), whatever
//!   characters it holds (spaces, tabs, newlines, quotes, `@`, `:`, `/`,
//!   percent escapes);
//! - the value of a secret parameter in a query string
//!   (`?password=…`, `&sslpassword=…`, `?api_key=…`);
//! - the value of a secret key in `key=value` text, such as a libpq
//!   connection string (`host=db password='a b\'c'`) or a message that
//!   quotes a setting;
//! - the value of a configuration key whose name says it is a secret
//!   ([`is_secret_key`]).
//!
//! [`redact_url`] and [`redact_text`] also make the result safe to print
//! on one line: control characters become visible escapes (`\n`, `\t`,
//! `\u{1b}`), and a very long value is cut to its first
//! [`MAX_VALUE_CHARS`] characters followed by its length in bytes. The
//! `mask_*` functions only hide secrets, for output that escapes by itself
//! (TOML, JSON).
//!
//! ```
//! use outbox::redact::{is_secret_key, redact_text, redact_url};
//!
//! assert_eq!(redact_url("postgres://app:s e\ncret@db/app"), "postgres://app:***@db/app");
//! assert_eq!(
//!     redact_url("postgres://app@db/app?sslmode=require&password=hunter2"),
//!     "postgres://app@db/app?sslmode=require&password=***"
//! );
//! assert_eq!(
//!     redact_text("cannot connect: host=db password='a b' dbname=app"),
//!     "cannot connect: host=db password=*** dbname=app"
//! );
//! assert_eq!(redact_text("line one\nline two"), "line one\\nline two");
//! assert!(is_secret_key("sasl.password") && !is_secret_key("sasl.username"));
//! ```
//!
//! Hiding errs on the side of hiding: when it is unclear where a password
//! ends (an `@` further on in the text), more is hidden, never less.

/// What a hidden secret is replaced with.
pub const REDACTED: &str = "***";

/// Markers that mean "already hidden": a value that is one of them is
/// left alone, so that redacting twice changes nothing.
const MARKERS: &[&str] = &[REDACTED, "<redacted>"];

/// The longest value (a URL, or a word of a message) shown whole; a longer
/// one is cut to this many characters, followed by `…(N bytes)`.
pub const MAX_VALUE_CHARS: usize = 200;

/// The longest message [`redact_text`] returns whole.
pub const MAX_TEXT_CHARS: usize = 4_000;

/// The placeholder credentials used in the program's own help texts
/// (`amqp://USER:PASS@HOST:PORT/VHOST`), shown as they are.
const PLACEHOLDER_USERINFO: &str = "USER:PASS";

/// Whether a configuration key (or a query or `key=value` parameter) names
/// a secret, whose value is never shown.
///
/// The name is split into words at every character that is not an ASCII
/// letter or digit, ignoring case. It is a secret if
///
/// - a word contains `password`, `passwd`, `passphrase`, `secret`,
///   `token`, `credential` or `authorization`, or is `pass` or `pwd`
///   (`sasl.password`, `sslpassword`, `ssl.key.password`, `client_secret`,
///   `api_token`, `credentials`);
/// - its last word ends in `key` (`api_key`, `apikey`, `private_key`,
///   `sslkey`), or its last two are a `…key` and `pem` (`ssl.key.pem`).
///
/// A key that merely mentions `key` elsewhere stays visible:
/// `routing_key_template`, `ssl.key.location` and `key_template` hold
/// harmless values an operator needs to see.
///
/// ```
/// use outbox::redact::is_secret_key;
/// for secret in ["sasl.password", "ssl.key.password", "secret", "api_key", "ssl.key.pem"] {
///     assert!(is_secret_key(secret), "{secret}");
/// }
/// for plain in ["sasl.username", "key_template", "routing_key_template", "ssl.key.location"] {
///     assert!(!is_secret_key(plain), "{plain}");
/// }
/// ```
pub fn is_secret_key(key: &str) -> bool {
    let key = key.to_ascii_lowercase();
    let words: Vec<&str> = key
        .split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|w| !w.is_empty())
        .collect();
    const INSIDE: &[&str] = &[
        "password",
        "passwd",
        "passphrase",
        "secret",
        "token",
        "credential",
        "authorization",
    ];
    if words
        .iter()
        .any(|w| INSIDE.iter().any(|s| w.contains(s)) || matches!(*w, "pass" | "pwd"))
    {
        return true;
    }
    match words.as_slice() {
        [.., last] if last.ends_with("key") => true,
        [.., key, "pem"] => key.ends_with("key"),
        _ => false,
    }
}

/// One URL or connection string, ready to print: its password and secret
/// parameters hidden ([`mask_url`]), control characters escaped
/// ([`escape_controls`]) and cut to [`MAX_VALUE_CHARS`] characters.
///
/// The whole of `url` is taken to be the value, so a password may hold any
/// character, `@` included: the userinfo ends at the last `@`.
///
/// ```
/// use outbox::redact::redact_url;
/// assert_eq!(redact_url("amqp://app:p@ss/w:rd@rabbit:5672/%2f"), "amqp://app:***@rabbit:5672/%2f");
/// assert_eq!(redact_url("redis://:hunter2@cache:6379/0"), "redis://:***@cache:6379/0");
/// assert_eq!(redact_url("postgres://app@db/app"), "postgres://app@db/app");
/// ```
pub fn redact_url(url: &str) -> String {
    shorten(&escape_controls(&mask_url(url)), MAX_VALUE_CHARS)
}

/// A message (an error, a log line) ready to print on one line: every
/// secret found in it hidden ([`mask_text`]), trailing line breaks
/// dropped, other control characters escaped
/// ([`escape_controls`]), every word longer than [`MAX_VALUE_CHARS`]
/// characters cut, and the whole cut to [`MAX_TEXT_CHARS`].
///
/// ```
/// use outbox::redact::redact_text;
/// assert_eq!(
///     redact_text("cannot connect to postgres://app:hunter2@db:5432/app: refused"),
///     "cannot connect to postgres://app:***@db:5432/app: refused"
/// );
/// let long = "x".repeat(1_000);
/// assert_eq!(redact_text(&long), format!("{}…(1000 bytes)", "x".repeat(200)));
/// ```
pub fn redact_text(text: &str) -> String {
    // A message ending in a line break (as some parsers' do) ends there.
    let text = text.trim_end_matches(['\n', '\r']);
    let line = escape_controls(&mask_text(text));
    let words = if line.len() > MAX_VALUE_CHARS {
        line.split(' ')
            .map(|w| shorten(w, MAX_VALUE_CHARS))
            .collect::<Vec<_>>()
            .join(" ")
    } else {
        line
    };
    shorten(&words, MAX_TEXT_CHARS)
}

/// `url` (one URL or connection string) with its secrets replaced by
/// [`REDACTED`] and nothing else changed: the userinfo's password (up to
/// the last `@`), the values of secret query parameters (see
/// [`is_secret_key`]; percent-encoded names are decoded first), and, for a
/// value that is not a URL, the values of secret keys as in [`mask_text`].
pub fn mask_url(url: &str) -> String {
    let body = url.trim_start();
    let lead = &url[..url.len() - body.len()];
    let Some(scheme) = scheme_len(body) else {
        return mask_text_urls(&mask_pairs(url, false));
    };
    let (head, rest) = body.split_at(scheme + 3);
    let mut out = String::with_capacity(url.len());
    out.push_str(lead);
    out.push_str(head);
    let mut host = rest;
    if let Some(at) = rest.rfind('@') {
        let userinfo = &rest[..at];
        let user_end = userinfo.find(':').unwrap_or(userinfo.len());
        // An `@` after a path or query separator in the user part belongs
        // to the path or the query, not to a userinfo.
        if !userinfo[..user_end].contains(['/', '?', '#']) {
            if user_end < userinfo.len() && userinfo != PLACEHOLDER_USERINFO {
                out.push_str(&userinfo[..user_end]);
                out.push(':');
                out.push_str(REDACTED);
            } else {
                out.push_str(userinfo);
            }
            out.push('@');
            host = &rest[at + 1..];
        }
    }
    match host.find('?') {
        Some(q) => {
            out.push_str(&mask_pairs(&host[..q], false));
            out.push('?');
            out.push_str(&mask_pairs(&mask_query(&host[q + 1..]), true));
        }
        None => out.push_str(&mask_pairs(host, false)),
    }
    out
}

/// `text` (free text: a message that may quote URLs, connection strings or
/// settings) with every secret found replaced by [`REDACTED`] and nothing
/// else changed.
///
/// A text that starts with a URL is taken as one URL ([`mask_url`]).
/// Elsewhere a URL's userinfo is found by its `user:` prefix, and the
/// password is taken to run to the last `@` of the text (so it may hold
/// spaces, newlines or `@`); `host:PORT/…` without a later `@` is left
/// alone. `key=value` pairs with a secret key (`password=S`,
/// `password = 'a b'`, `"sasl.password" = "S"`) lose their value: a
/// quoted value up to its closing quote (backslash escapes honoured), an
/// unquoted one up to the next whitespace.
pub fn mask_text(text: &str) -> String {
    if scheme_len(text.trim_start()).is_some() {
        return mask_url(text);
    }
    mask_text_urls(&mask_pairs(text, false))
}

/// `text` with every control character (newline, carriage return, tab,
/// escape, …) and the Unicode line and paragraph separators written as a
/// visible escape (`\n`, `\r`, `\t`, `\u{1b}`), so that it prints as one
/// line.
pub fn escape_controls(text: &str) -> String {
    if !text.chars().any(needs_escape) {
        return text.to_owned();
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if needs_escape(c) => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
            c => out.push(c),
        }
    }
    out
}

/// `text` cut to its first `max_chars` characters followed by
/// `…(N bytes)`, N being the length of the whole text; a text that is not
/// longer is returned as it is.
pub fn shorten(text: &str, max_chars: usize) -> String {
    match text.char_indices().nth(max_chars) {
        Some((end, _)) => format!("{}…({} bytes)", &text[..end], text.len()),
        None => text.to_owned(),
    }
}

fn needs_escape(c: char) -> bool {
    c.is_control() || c == '\u{2028}' || c == '\u{2029}'
}

/// The length of the scheme if `text` starts with `scheme://` (a letter,
/// then letters, digits, `+`, `-` or `.`).
fn scheme_len(text: &str) -> Option<usize> {
    let end = text.find("://")?;
    let scheme = &text[..end];
    let mut chars = scheme.chars();
    let first_ok = chars.next().is_some_and(|c| c.is_ascii_alphabetic());
    let rest_ok = chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'));
    (first_ok && rest_ok).then_some(end)
}

fn is_key_char(c: u8) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, b'_' | b'.' | b'-' | b'%')
}

/// `name` with its `%XX` escapes decoded (invalid ones kept).
fn percent_decode(name: &str) -> String {
    let bytes = name.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            if let (Some(h), Some(l)) = (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                out.push((h * 16 + l) as u8);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A URL query (after `?`) with the values of secret parameters hidden;
/// a value runs to the next `&`.
fn mask_query(query: &str) -> String {
    query
        .split('&')
        .map(|param| match param.split_once('=') {
            Some((name, _)) if is_secret_key(&percent_decode(name.trim())) => {
                format!("{name}={REDACTED}")
            }
            _ => param.to_owned(),
        })
        .collect::<Vec<_>>()
        .join("&")
}

/// `text` with the value of every `key=value` pair whose key is a secret
/// hidden. Spaces may surround `=`; the key may be in double quotes; a
/// value in single or double quotes runs to the closing quote (a backslash
/// escapes the next character), an unquoted one to the next whitespace
/// (or `&` when `in_query`).
fn mask_pairs(text: &str, in_query: bool) -> String {
    let bytes = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut copied = 0;
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] != b'=' || bytes.get(i + 1) == Some(&b'=') || (i > 0 && bytes[i - 1] == b'=') {
            i += 1;
            continue;
        }
        // The key, backwards from `=`: spaces, an optional closing quote,
        // key characters.
        let mut k = i;
        while k > copied && matches!(bytes[k - 1], b' ' | b'\t') {
            k -= 1;
        }
        let quoted_key = k > copied && bytes[k - 1] == b'"';
        let key_end = if quoted_key { k - 1 } else { k };
        let mut start = key_end;
        while start > copied && is_key_char(bytes[start - 1]) {
            start -= 1;
        }
        let key = &text[start..key_end];
        if key.is_empty() || !is_secret_key(&percent_decode(key)) {
            i += 1;
            continue;
        }
        // The value.
        let mut v = i + 1;
        while v < bytes.len() && matches!(bytes[v], b' ' | b'\t') {
            v += 1;
        }
        let rest = &text[v..];
        if rest.is_empty() || MARKERS.iter().any(|m| rest.starts_with(m)) {
            i = v.max(i + 1);
            continue;
        }
        // In `"password=S"` (a quoted pair, as `{:?}` prints it) the
        // value ends at the closing quote.
        let in_quotes = start > 0 && bytes[start - 1] == b'"' && !quoted_key;
        let end = match bytes[v] {
            q @ (b'\'' | b'"') => closing_quote(bytes, v + 1, q),
            _ => {
                let mut e = v;
                while e < bytes.len() {
                    match bytes[e] {
                        b'\\' => e += 2,
                        b'&' if in_query => break,
                        b'"' if in_quotes => break,
                        c if c.is_ascii_whitespace() => break,
                        _ => e += 1,
                    }
                }
                e.min(bytes.len())
            }
        };
        out.push_str(&text[copied..v]);
        out.push_str(REDACTED);
        copied = end;
        i = end;
    }
    out.push_str(&text[copied..]);
    out
}

/// The index just past the quote `q` that closes a value starting at
/// `from`, or the end of `bytes`.
fn closing_quote(bytes: &[u8], from: usize, q: u8) -> usize {
    let mut e = from;
    while e < bytes.len() {
        match bytes[e] {
            b'\\' => e += 2,
            c if c == q => return e + 1,
            _ => e += 1,
        }
    }
    bytes.len()
}

/// `text` with the password of every `scheme://user:password@` hidden (see
/// [`mask_text`] for where a password is taken to end).
fn mask_text_urls(text: &str) -> String {
    if !text.contains('@') {
        return text.to_owned();
    }
    let mut out = String::with_capacity(text.len());
    let mut copied = 0;
    let mut next = text.find("://");
    while let Some(sep) = next {
        let rest_start = sep + 3;
        next = text[rest_start..].find("://").map(|n| rest_start + n);
        if sep < copied {
            continue;
        }
        // The password runs at most to the next URL.
        let bound = next.unwrap_or(text.len());
        let rest = &text[rest_start..bound];
        let Some(user_end) = rest.find(|c: char| {
            c == ':' || c == '@' || c == '/' || c == '?' || c == '#' || c.is_whitespace()
        }) else {
            continue;
        };
        if !rest[user_end..].starts_with(':') {
            continue;
        }
        let after = &rest[user_end + 1..];
        let port_digits = after.bytes().take_while(u8::is_ascii_digit).count();
        let is_port = (1..=5).contains(&port_digits)
            && after[port_digits..]
                .chars()
                .next()
                .is_none_or(|c| c != '@' && !c.is_alphanumeric());
        let already = MARKERS
            .iter()
            .any(|m| after.strip_prefix(m).is_some_and(|a| a.starts_with('@')));
        let placeholder = rest.starts_with(PLACEHOLDER_USERINFO)
            && rest[PLACEHOLDER_USERINFO.len()..].starts_with('@');
        if is_port || already || placeholder {
            continue;
        }
        let Some(at) = after.rfind('@') else {
            continue;
        };
        let pass_start = rest_start + user_end + 1;
        out.push_str(&text[copied..pass_start]);
        out.push_str(REDACTED);
        copied = pass_start + at;
    }
    out.push_str(&text[copied..]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each input holds the secret `S3cr3t` (or a variant of it); the
    /// output must not, must be one line, and, where given, must be exact.
    const URLS: &[(&str, Option<&str>)] = &[
        (
            "postgres://app:S3cr3t@db:5432/app",
            Some("postgres://app:***@db:5432/app"),
        ),
        (
            "postgresql://app:S3cr3t@db/app?sslmode=require",
            Some("postgresql://app:***@db/app?sslmode=require"),
        ),
        (
            "postgres://app:S3 cr3t@db/app",
            Some("postgres://app:***@db/app"),
        ),
        (
            "postgres://app:S3\tcr3t@db/app",
            Some("postgres://app:***@db/app"),
        ),
        (
            "postgres://app:S3\ncr3t@db/app",
            Some("postgres://app:***@db/app"),
        ),
        (
            "postgres://app:S3\"cr'3t@db/app",
            Some("postgres://app:***@db/app"),
        ),
        (
            "postgres://app:S3@cr@3t@db/app",
            Some("postgres://app:***@db/app"),
        ),
        (
            "postgres://app:S3:cr/3t?x#y@db/app",
            Some("postgres://app:***@db/app"),
        ),
        (
            "postgres://app:S3cr3t%40%2F%20@db/app",
            Some("postgres://app:***@db/app"),
        ),
        ("postgres://:S3cr3t@db/app", Some("postgres://:***@db/app")),
        (
            "postgres://app@127.0.0.1:1/db?password=S3cr3t",
            Some("postgres://app@127.0.0.1:1/db?password=***"),
        ),
        (
            "postgres://app@db/x?sslmode=disable&sslpassword=S3cr3t&application_name=a",
            Some("postgres://app@db/x?sslmode=disable&sslpassword=***&application_name=a"),
        ),
        (
            "postgres://db/x?PassWord=S3cr3t",
            Some("postgres://db/x?PassWord=***"),
        ),
        (
            "postgres://db/x?pass%77ord=S3cr3t",
            Some("postgres://db/x?pass%77ord=***"),
        ),
        (
            "postgres://db/x?password=S3 cr3t",
            Some("postgres://db/x?password=***"),
        ),
        (
            "postgres://db/x?password=S3cr@3t",
            Some("postgres://db/x?password=***"),
        ),
        (
            "postgres://db/x?passwd=S3cr3t#frag",
            Some("postgres://db/x?passwd=***"),
        ),
        (
            "amqp://guest:S3cr3t@rabbit:5672/%2f",
            Some("amqp://guest:***@rabbit:5672/%2f"),
        ),
        (
            "amqps://guest:S3 cr3t@rabbit:5671/vhost?heartbeat=10",
            Some("amqps://guest:***@rabbit:5671/vhost?heartbeat=10"),
        ),
        (
            "kafka://u:S3cr3t@k1:9092,k2:9092",
            Some("kafka://u:***@k1:9092,k2:9092"),
        ),
        (
            "redis://:S3cr3t@cache:6379/0",
            Some("redis://:***@cache:6379/0"),
        ),
        ("nats://u:S3cr3t@nats:4222", Some("nats://u:***@nats:4222")),
        (
            "https://u:S3cr3t@h/p?api_key=S3cr3t&token=S3cr3t&page=2",
            Some("https://u:***@h/p?api_key=***&token=***&page=2"),
        ),
        (
            "host=db port=5432 password=S3cr3t dbname=app",
            Some("host=db port=5432 password=*** dbname=app"),
        ),
        (
            "host=db password='S3 cr\\'3t' dbname=app",
            Some("host=db password=*** dbname=app"),
        ),
        (
            "host=db password = 'S3cr3t'",
            Some("host=db password = ***"),
        ),
        (
            "host=db sslpassword=S3cr3t\\ x user=u",
            Some("host=db sslpassword=*** user=u"),
        ),
        ("  postgres://u:S3cr3t@h/d", Some("  postgres://u:***@h/d")),
    ];

    #[test]
    fn urls_lose_their_secrets() {
        for (input, expected) in URLS {
            for shown in [redact_url(input), redact_text(input)] {
                assert!(
                    !shown.contains("S3") && !shown.contains("cr3t"),
                    "{input:?} -> {shown:?}"
                );
                assert!(!shown.contains(['\n', '\r', '\t']), "{shown:?}");
                if let Some(expected) = expected {
                    assert_eq!(&shown, expected, "{input:?}");
                }
            }
        }
    }

    #[test]
    fn messages_lose_their_secrets() {
        let cases: &[(&str, &str)] = &[
            (
                "cannot connect to postgres://app:S3cr3t@db:5432/x: connection refused",
                "cannot connect to postgres://app:***@db:5432/x: connection refused",
            ),
            (
                "cannot connect to postgres://app:S3 cr\n3t@db:5432/x: refused",
                "cannot connect to postgres://app:***@db:5432/x: refused",
            ),
            (
                "a amqp://u:S3cr3t@h/v and kafka://h:9092",
                "a amqp://u:***@h/v and kafka://h:9092",
            ),
            (
                "two: postgres://a:S3cr3t@h/x, amqp://b:S3cr3t@r/v",
                "two: postgres://a:***@h/x, amqp://b:***@r/v",
            ),
            (
                "invalid connection string host=db password='S3 cr3t' user=u",
                "invalid connection string host=db password=*** user=u",
            ),
            (
                "config: \"sasl.password\" = \"S3cr3t\" in [publisher.kafka.properties]",
                "config: \"sasl.password\" = *** in [publisher.kafka.properties]",
            ),
            (
                "failed: url postgres://db/x?password=S3cr3t&sslmode=require",
                "failed: url postgres://db/x?password=***",
            ),
            ("api_token=S3cr3t, retrying", "api_token=*** retrying"),
            (
                "invalid level \"password=S3cr3t\\\"x\" (set by X)",
                "invalid level \"password=***\" (set by X)",
            ),
        ];
        for (input, expected) in cases {
            assert_eq!(&redact_text(input), expected, "{input:?}");
        }
    }

    #[test]
    fn harmless_text_is_left_alone() {
        for text in [
            "postgres://app@db:5432/app",
            "postgres://db:5432/app?sslmode=require&application_name=outbox",
            "cannot connect to postgres://db:5432/x: role \"a@b\" does not exist",
            "use stdout, file:PATH, kafka://HOST:PORT[,HOST:PORT…] or amqp://USER:PASS@HOST:PORT/VHOST",
            "expected postgres://USER:PASS@HOST:PORT/DB",
            "invalid relay.batch_size = 0 (set by --batch-size): use 1 to 10000",
            "routing_key_template = {event_type}, a == b, x=",
            "kafka setting properties.sasl.password = <redacted>: cannot be set here",
            "already postgres://u:***@h/x: refused for a@b",
            "",
        ] {
            assert_eq!(redact_text(text), text);
        }
    }

    #[test]
    fn redacting_twice_changes_nothing() {
        for (input, _) in URLS {
            let once = redact_text(input);
            assert_eq!(redact_text(&once), once, "{input:?}");
            let once = redact_url(input);
            assert_eq!(redact_url(&once), once, "{input:?}");
        }
    }

    #[test]
    fn errors_stay_on_one_line_and_long_values_are_cut() {
        assert_eq!(
            redact_text("a\nb\r\tc\u{1b}[31m\u{2028}"),
            "a\\nb\\r\\tc\\u{1b}[31m\\u{2028}"
        );
        let url = format!("postgres://u:{}@h/{}", "S".repeat(300), "d".repeat(300));
        let shown = redact_url(&url);
        assert!(!shown.contains("SS"), "{shown}");
        assert!(shown.ends_with(&format!("…({} bytes)", "postgres://u:***@h/".len() + 300)));
        assert_eq!(
            shown.chars().count(),
            MAX_VALUE_CHARS + "…(319 bytes)".chars().count()
        );
        let text = format!("schema {} is invalid", "x".repeat(10_000_000));
        let shown = redact_text(&text);
        assert_eq!(
            shown,
            format!("schema {}…(10000000 bytes) is invalid", "x".repeat(200))
        );
        let words = "word ".repeat(2_000);
        assert!(redact_text(&words).ends_with("…(10000 bytes)"));
        assert_eq!(shorten("ééé", 2), "éé…(6 bytes)");
        assert_eq!(shorten("abc", 3), "abc");
    }

    #[test]
    fn hostile_input_stays_fast() {
        let start = std::time::Instant::now();
        for text in [
            "a://".repeat(500_000),
            "x=".repeat(1_000_000),
            "password=".repeat(200_000),
            format!("postgres://u:{}", "@:".repeat(500_000)),
            "'".repeat(1_000_000),
        ] {
            let _ = redact_text(&text);
            let _ = redact_url(&text);
        }
        assert!(start.elapsed() < std::time::Duration::from_secs(10));
    }

    #[test]
    fn secret_keys() {
        for key in [
            "password",
            "sasl.password",
            "ssl.key.password",
            "ssl.keystore.password",
            "sslpassword",
            "passwd",
            "PGPASSWORD",
            "secret",
            "client_secret",
            "sasl.oauthbearer.client.secret",
            "api_key",
            "apiKey",
            "private_key",
            "ssl.key.pem",
            "token",
            "access_token",
            "credentials",
            "pass",
            "pwd",
            "Authorization",
        ] {
            assert!(is_secret_key(key), "{key}");
        }
        for key in [
            "sasl.username",
            "user",
            "key_template",
            "routing_key_template",
            "ssl.key.location",
            "ssl.certificate.pem",
            "linger.ms",
            "database_url",
            "host",
            "sslmode",
            "",
        ] {
            assert!(!is_secret_key(key), "{key}");
        }
    }
}
