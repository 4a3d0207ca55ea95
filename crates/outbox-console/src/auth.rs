//! Who may use the console: the password, sessions held in memory behind
//! an `HttpOnly`, `SameSite=Strict` cookie, and a per-session CSRF token
//! every POST must carry. The decisions are pure functions, tested without
//! a server.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use rand::Rng;

/// The session cookie's name.
pub const COOKIE: &str = "outbox_console";

/// How long a session lasts after it is opened.
const SESSION_TTL: Duration = Duration::from_secs(12 * 3600);

/// Sessions kept at once; the oldest is dropped beyond it, so anonymous
/// visits (loopback without a password) cannot grow memory without bound.
const MAX_SESSIONS: usize = 1024;

/// Whether a request's `Host` names this machine's loopback (`localhost`,
/// a `*.localhost` name, `127.0.0.0/8` or `::1`, any port): what a console
/// without a password answers. Another name reaching a loopback listener
/// is a page elsewhere that pointed its own domain at 127.0.0.1 (DNS
/// rebinding) to read the console with the browser's access; refusing it
/// keeps such a page from reading or driving it.
pub fn loopback_host(host: Option<&str>) -> bool {
    let Some(host) = host else {
        return false;
    };
    let name = if let Some(rest) = host.strip_prefix('[') {
        match rest.split_once(']') {
            Some((ip, port)) if port.is_empty() || port.starts_with(':') => ip,
            _ => return false,
        }
    } else {
        match host.rsplit_once(':') {
            Some((name, port)) if port.bytes().all(|b| b.is_ascii_digit()) => name,
            Some(_) => return false,
            None => host,
        }
    };
    let lower = name.to_ascii_lowercase();
    if lower == "localhost" || lower.ends_with(".localhost") {
        return true;
    }
    name.parse::<std::net::IpAddr>()
        .is_ok_and(|ip| ip.is_loopback() || is_mapped_loopback(ip))
}

/// Whether `ip` is an IPv4-mapped IPv6 address of the IPv4 loopback
/// (`::ffff:127.x.y.z`), which `is_loopback` does not count: the
/// console's Host check and the `outbox` program's database addresses and
/// listen addresses count it as loopback.
pub fn is_mapped_loopback(ip: std::net::IpAddr) -> bool {
    match ip {
        std::net::IpAddr::V6(v6) => v6.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback()),
        std::net::IpAddr::V4(_) => false,
    }
}

/// Equality whose time does not depend on where `a` and `b` differ.
pub fn ct_eq(a: &[u8], b: &[u8]) -> bool {
    let len = a.len().max(b.len());
    let mut diff = (a.len() != b.len()) as u8;
    for i in 0..len {
        diff |= a.get(i).copied().unwrap_or(0) ^ b.get(i).copied().unwrap_or(0);
    }
    diff == 0
}

/// 32 random bytes from the thread's CSPRNG, as hex.
pub fn token() -> String {
    let bytes: [u8; 32] = rand::rng().random();
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A signed-in (or, without a password, anonymous) browser.
#[derive(Debug, Clone)]
pub struct Session {
    /// The token every form of this session carries.
    pub csrf: String,
    /// Whether the password was given (always true without a password).
    pub signed_in: bool,
    /// A message for the next page (the outcome of an action).
    pub flash: Option<String>,
    opened: Instant,
    /// Its cookie has come back (or the password was given): a browser
    /// holds it. Sessions nobody came back with are dropped first.
    held: bool,
}

/// The sessions, by cookie value.
#[derive(Default)]
pub struct Sessions {
    map: Mutex<HashMap<String, Session>>,
}

impl Sessions {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Session>> {
        self.map.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Opens a session; returns its cookie value. `held`: the browser is
    /// known to hold it (it gave the password); else it is held once its
    /// cookie comes back ([`Sessions::get`]). Beyond [`MAX_SESSIONS`] the
    /// oldest session not held is dropped, and a held one only when every
    /// session is held: cookie-less requests (which any page elsewhere can
    /// make a browser send) open sessions that crowd out only each other.
    pub fn open(&self, signed_in: bool, held: bool) -> (String, Session) {
        let id = token();
        let session = Session {
            csrf: token(),
            signed_in,
            flash: None,
            opened: Instant::now(),
            held,
        };
        let mut map = self.lock();
        map.retain(|_, s| s.opened.elapsed() < SESSION_TTL);
        if map.len() >= MAX_SESSIONS {
            if let Some(oldest) = map
                .iter()
                .min_by_key(|(_, s)| (s.held, s.opened))
                .map(|(k, _)| k.clone())
            {
                map.remove(&oldest);
            }
        }
        map.insert(id.clone(), session.clone());
        (id, session)
    }

    /// The live session of cookie value `id`, from now on held.
    pub fn get(&self, id: &str) -> Option<Session> {
        let mut map = self.lock();
        let s = map
            .get_mut(id)
            .filter(|s| s.opened.elapsed() < SESSION_TTL)?;
        s.held = true;
        Some(s.clone())
    }

    /// Keeps `message` for the session's next page. It is markup composed
    /// with maud (every value in it escaped), which the page shows as is.
    pub fn set_flash(&self, id: &str, message: maud::Markup) {
        if let Some(s) = self.lock().get_mut(id) {
            s.flash = Some(message.into_string());
        }
    }

    /// The session's message, once.
    pub fn take_flash(&self, id: &str) -> Option<String> {
        self.lock().get_mut(id).and_then(|s| s.flash.take())
    }

    pub fn close(&self, id: &str) {
        self.lock().remove(id);
    }
}

/// The value of cookie `name` in a `Cookie` header.
pub fn cookie<'a>(header: &'a str, name: &str) -> Option<&'a str> {
    header.split(';').find_map(|pair| {
        let (k, v) = pair.trim().split_once('=')?;
        (k == name).then_some(v)
    })
}

/// Why a POST is refused, if it is.
#[derive(Debug, PartialEq, Eq)]
pub enum Refusal {
    /// No session, or not signed in.
    NotSignedIn,
    /// The form's token is missing or wrong, or the request came from
    /// another site.
    Csrf,
}

/// Whether a POST may proceed: a signed-in session, a form token equal to
/// the session's, and, when the browser says where the request comes from
/// (`Origin`), this very host.
pub fn check_post(
    session: Option<&Session>,
    form_token: Option<&str>,
    origin: Option<&str>,
    host: Option<&str>,
) -> Result<(), Refusal> {
    let Some(session) = session.filter(|s| s.signed_in) else {
        return Err(Refusal::NotSignedIn);
    };
    if let Some(origin) = origin {
        if !same_origin(origin, host) {
            return Err(Refusal::Csrf);
        }
    }
    match form_token {
        Some(t) if ct_eq(t.as_bytes(), session.csrf.as_bytes()) => Ok(()),
        _ => Err(Refusal::Csrf),
    }
}

/// Whether `Origin` names the host the request was sent to.
pub fn same_origin(origin: &str, host: Option<&str>) -> bool {
    let Some(host) = host else { return false };
    origin
        .strip_prefix("http://")
        .or_else(|| origin.strip_prefix("https://"))
        .is_some_and(|rest| rest.eq_ignore_ascii_case(host))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn session(signed_in: bool) -> Session {
        Sessions::default().open(signed_in, true).1
    }

    #[test]
    fn a_post_needs_a_signed_in_session_and_its_own_token() {
        let s = session(true);
        let host = Some("127.0.0.1:8080");
        assert_eq!(check_post(Some(&s), Some(&s.csrf), None, host), Ok(()));
        assert_eq!(
            check_post(Some(&s), Some(&s.csrf), Some("http://127.0.0.1:8080"), host),
            Ok(())
        );
        assert_eq!(
            check_post(None, Some(&s.csrf), None, host),
            Err(Refusal::NotSignedIn)
        );
        assert_eq!(
            check_post(Some(&session(false)), Some(&s.csrf), None, host),
            Err(Refusal::NotSignedIn)
        );
        assert_eq!(check_post(Some(&s), None, None, host), Err(Refusal::Csrf));
        assert_eq!(
            check_post(Some(&s), Some(&session(true).csrf), None, host),
            Err(Refusal::Csrf)
        );
        assert_eq!(
            check_post(Some(&s), Some(&s.csrf), Some("http://evil.example"), host),
            Err(Refusal::Csrf)
        );
        assert_eq!(
            check_post(Some(&s), Some(&s.csrf), Some("null"), host),
            Err(Refusal::Csrf)
        );
    }

    #[test]
    fn tokens_are_unguessable_and_compared_whole() {
        assert_ne!(token(), token());
        assert_eq!(token().len(), 64);
        assert!(ct_eq(b"abc", b"abc"));
        assert!(!ct_eq(b"abc", b"abd"));
        assert!(!ct_eq(b"abc", b"abcd"));
        assert!(!ct_eq(b"", b"a"));
    }

    #[test]
    fn an_ipv4_mapped_loopback_host_is_loopback_too() {
        assert!(loopback_host(Some("[::ffff:127.0.0.1]:8080")));
        assert!(!loopback_host(Some("[::ffff:192.0.2.1]")));
    }

    #[test]
    fn cookies_are_found_by_exact_name() {
        assert_eq!(cookie("a=1; outbox_console=xyz; b=2", COOKIE), Some("xyz"));
        assert_eq!(cookie("xoutbox_console=1", COOKIE), None);
    }

    #[test]
    fn sessions_are_bounded_and_closed_ones_are_gone() {
        let sessions = Sessions::default();
        let (first, _) = sessions.open(true, false);
        for _ in 0..MAX_SESSIONS {
            sessions.open(false, false);
        }
        assert!(
            sessions.get(&first).is_none(),
            "the oldest was kept beyond the cap"
        );
        let (id, _) = sessions.open(true, false);
        assert!(sessions.get(&id).is_some());
        sessions.close(&id);
        assert!(sessions.get(&id).is_none());
    }

    #[test]
    fn sessions_opened_without_a_cookie_crowd_out_only_each_other() {
        let sessions = Sessions::default();
        let (operator, _) = sessions.open(true, false);
        // Its cookie came back once: a browser holds it.
        assert!(sessions.get(&operator).is_some());
        let (signed_in, _) = sessions.open(true, true);
        for _ in 0..3 * MAX_SESSIONS {
            sessions.open(true, false);
        }
        assert!(
            sessions.get(&operator).is_some(),
            "evicted by cookie-less visits"
        );
        assert!(
            sessions.get(&signed_in).is_some(),
            "evicted by cookie-less visits"
        );
    }

    #[test]
    fn only_loopback_names_pass_the_host_check() {
        for ok in [
            "localhost",
            "localhost:8080",
            "LOCALHOST:1",
            "console.localhost:8080",
            "127.0.0.1:8080",
            "127.1.2.3",
            "[::1]:8080",
            "[::1]",
        ] {
            assert!(loopback_host(Some(ok)), "{ok}");
        }
        for refused in [
            "evil.example:8080",
            "localhost.evil.example",
            "10.0.0.5:8080",
            "[::2]:80",
            "127.0.0.1:80x",
            "[::1]x",
            "",
        ] {
            assert!(!loopback_host(Some(refused)), "{refused}");
        }
        assert!(!loopback_host(None));
    }
}
