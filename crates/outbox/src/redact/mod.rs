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
//! Two display helpers serve every crate: [`shorten`] cuts a long value
//! to a length and says how long it was, [`hide`] replaces a secret known
//! by its value (a password a client was given) wherever a message quotes
//! it.
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
//!
//! One file (its tests live beside it): the URL, query-string and key=value
//! scanners share their token rules, and a quarter of it is this
//! documentation.
//!
//! Longer than most files: one rule for what a secret looks like, applied
//! to URLs, `key=value` text and whole messages, whose masking functions
//! share the same small scanners (the tests are in `tests.rs`).

mod display;

pub use display::{fit, hide, quoted, shorten};

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
mod tests;
