//! Sign-in throttling, decided without a clock of its own (every call is
//! given the time), so it is tested without waiting:
//!
//! - Per client address ([`Client`]: an IPv4 address, or an IPv6 /64): the
//!   first [`FREE_GUESSES`] wrong passwords cost nothing; each further one
//!   makes the address wait twice as long as the one before (1 s, 2 s, 4 s,
//!   … at most [`MAX_WAIT`]) before its next try. A try counts as wrong
//!   from the moment it is let through, so guesses sent in parallel are
//!   counted before any is answered; a right password clears the address.
//! - Globally: a token bucket ([`GLOBAL_BURST`], refilled at
//!   [`GLOBAL_PER_SECOND`]) bounds the tries of addresses that have guessed
//!   wrong before, from however many addresses. An address with no wrong
//!   guess on record is never held back by it, so the operator signs in
//!   from their own address while another is guessing.
//! - What was refused is tallied ([`Tally`]) and logged as one line per
//!   [`TALLY_WINDOW`], not a line per guess.

use std::collections::HashMap;
use std::fmt;
use std::net::IpAddr;
use std::time::{Duration, Instant};

/// Wrong passwords an address may send before it has to wait.
pub const FREE_GUESSES: u32 = 3;
/// The first wait; each further wrong password doubles it.
const FIRST_WAIT: Duration = Duration::from_secs(1);
/// The longest wait between two tries of one address.
pub const MAX_WAIT: Duration = Duration::from_secs(300);
/// An address whose last try is this old starts afresh.
const FORGET: Duration = Duration::from_secs(3600);
/// Addresses remembered at once. Beyond it a new address has no record of
/// its own and is held back by the global bucket like one that guessed
/// wrong, so many addresses cannot grow memory nor flush the records.
const MAX_CLIENTS: usize = 10_000;
/// Tries the global bucket holds.
pub const GLOBAL_BURST: f64 = 20.0;
/// Tries the global bucket gains per second.
pub const GLOBAL_PER_SECOND: f64 = 1.0;
/// How often the refusals are summed up in the log.
pub const TALLY_WINDOW: Duration = Duration::from_secs(10);

/// Whom a try comes from: an IPv4 address (an IPv4-mapped IPv6 one as
/// IPv4), or the /64 network of an IPv6 address, which one host commonly
/// holds whole.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, PartialOrd, Ord)]
pub struct Client(IpAddr);

impl Client {
    pub fn of(ip: IpAddr) -> Client {
        match ip {
            IpAddr::V4(v4) => Client(IpAddr::V4(v4)),
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) => Client(IpAddr::V4(v4)),
                None => {
                    let s = v6.segments();
                    Client(IpAddr::V6(std::net::Ipv6Addr::new(
                        s[0], s[1], s[2], s[3], 0, 0, 0, 0,
                    )))
                }
            },
        }
    }
}

impl fmt::Display for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            IpAddr::V4(a) => write!(f, "{a}"),
            IpAddr::V6(a) => write!(f, "{a}/64"),
        }
    }
}

/// Whether a sign-in may be tried now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Check the password.
    Try,
    /// Refuse without checking it; the client may try again after this.
    Wait(Duration),
}

struct Record {
    /// Tries let through since the last right password (each counted as
    /// wrong until it proves right).
    wrong: u32,
    /// No try before this.
    until: Instant,
    /// The last try let through.
    last: Instant,
}

/// The tries of every address, and the global bucket.
pub struct Throttle {
    clients: HashMap<Client, Record>,
    tokens: f64,
    filled_at: Option<Instant>,
}

impl Default for Throttle {
    fn default() -> Self {
        Throttle {
            clients: HashMap::new(),
            tokens: GLOBAL_BURST,
            filled_at: None,
        }
    }
}

/// How long an address waits after its `wrong`-th wrong password.
pub fn wait_after(wrong: u32) -> Duration {
    if wrong < FREE_GUESSES {
        return Duration::ZERO;
    }
    let doublings = (wrong - FREE_GUESSES).min(16);
    (FIRST_WAIT * 2u32.pow(doublings)).min(MAX_WAIT)
}

impl Throttle {
    /// Whether `client` may try a password at `now`; a try let through is
    /// counted as a wrong one until [`Throttle::succeeded`] says otherwise.
    pub fn attempt(&mut self, now: Instant, client: Client) -> Verdict {
        self.refill(now);
        if self
            .clients
            .get(&client)
            .is_some_and(|r| now.saturating_duration_since(r.last) >= FORGET)
        {
            self.clients.remove(&client);
        }
        if !self.clients.contains_key(&client) && self.clients.len() >= MAX_CLIENTS {
            self.clients
                .retain(|_, r| now.saturating_duration_since(r.last) < FORGET);
        }
        let known = self.clients.get(&client);
        if let Some(r) = known {
            if now < r.until {
                return Verdict::Wait(r.until - now);
            }
        }
        // Held back globally: an address with a wrong guess on record, or
        // one there is no room to remember.
        let suspect = known.is_some_and(|r| r.wrong > 0) || self.clients.len() >= MAX_CLIENTS;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
        } else if suspect {
            let missing = 1.0 - self.tokens;
            return Verdict::Wait(Duration::from_secs_f64(missing / GLOBAL_PER_SECOND));
        }
        if self.clients.len() < MAX_CLIENTS || self.clients.contains_key(&client) {
            let r = self.clients.entry(client).or_insert(Record {
                wrong: 0,
                until: now,
                last: now,
            });
            r.wrong += 1;
            r.until = now + wait_after(r.wrong);
            r.last = now;
        }
        Verdict::Try
    }

    /// `client` gave the right password: its record is cleared.
    pub fn succeeded(&mut self, client: Client) {
        self.clients.remove(&client);
    }

    fn refill(&mut self, now: Instant) {
        if let Some(at) = self.filled_at {
            let gained = now.saturating_duration_since(at).as_secs_f64() * GLOBAL_PER_SECOND;
            self.tokens = (self.tokens + gained).min(GLOBAL_BURST);
        }
        self.filled_at = Some(now);
    }
}

/// What went wrong at sign-in during one window, for one log line.
#[derive(Default)]
pub struct Tally {
    since: Option<Instant>,
    wrong: u64,
    refused: u64,
    per_client: HashMap<Client, u64>,
    /// Some came from addresses beyond the ones counted one by one.
    others: bool,
}

/// Addresses counted one by one in a window.
const TALLIED_CLIENTS: usize = 1000;

/// What a sign-in came to, for the tally.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Failure {
    /// A wrong password.
    Wrong,
    /// Refused by the throttle before the password was looked at.
    Refused,
}

impl Tally {
    /// Counts a failure of `client` at `now`; true when it opens a window,
    /// whose summary the caller logs [`TALLY_WINDOW`] later.
    pub fn note(&mut self, now: Instant, client: Client, failure: Failure) -> bool {
        let opens = self.since.is_none();
        self.since.get_or_insert(now);
        match failure {
            Failure::Wrong => self.wrong += 1,
            Failure::Refused => self.refused += 1,
        }
        if let Some(n) = self.per_client.get_mut(&client) {
            *n += 1;
        } else if self.per_client.len() < TALLIED_CLIENTS {
            self.per_client.insert(client, 1);
        } else {
            self.others = true;
        }
        opens
    }

    /// The window's summary, the tally emptied; `None` when nothing failed.
    pub fn take(&mut self, now: Instant) -> Option<Summary> {
        let since = self.since?;
        let busiest = self
            .per_client
            .iter()
            .max_by_key(|(c, n)| (**n, std::cmp::Reverse(**c)))
            .map(|(c, n)| (*c, *n));
        let summary = Summary {
            wrong: self.wrong,
            refused: self.refused,
            span: now
                .saturating_duration_since(since)
                .max(Duration::from_secs(1)),
            clients: self.per_client.len(),
            more_clients: self.others,
            busiest,
        };
        *self = Tally::default();
        Some(summary)
    }
}

/// One window's failed sign-ins.
#[derive(Debug, PartialEq)]
pub struct Summary {
    pub wrong: u64,
    pub refused: u64,
    pub span: Duration,
    pub clients: usize,
    pub more_clients: bool,
    pub busiest: Option<(Client, u64)>,
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let total = self.wrong + self.refused;
        let secs = self.span.as_secs_f64();
        write!(
            f,
            "{} wrong password{} and {} refused as too many in {:.0} s ({:.1}/s) from {}{} address{}",
            self.wrong,
            if self.wrong == 1 { "" } else { "s" },
            self.refused,
            secs,
            total as f64 / secs,
            self.clients,
            if self.more_clients { "+" } else { "" },
            if self.clients == 1 && !self.more_clients {
                ""
            } else {
                "es"
            },
        )?;
        if let Some((client, n)) = self.busiest {
            write!(f, ", most from {client} ({n})")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> Client {
        Client::of(s.parse().unwrap())
    }

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    #[test]
    fn the_wait_doubles_after_the_free_guesses_up_to_the_longest() {
        let waits: Vec<u64> = (1..=13).map(|n| wait_after(n).as_secs()).collect();
        assert_eq!(waits, [0, 0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 300, 300]);
        assert_eq!(wait_after(u32::MAX), MAX_WAIT);
    }

    #[test]
    fn parallel_guesses_from_one_address_are_counted_before_any_is_answered() {
        let mut t = Throttle::default();
        let now = Instant::now();
        let a = ip("203.0.113.7");
        let verdicts: Vec<Verdict> = (0..10).map(|_| t.attempt(now, a)).collect();
        assert_eq!(&verdicts[..3], &[Verdict::Try; 3]);
        assert!(verdicts[3..].iter().all(|v| *v == Verdict::Wait(secs(1))));
        // After the wait one more try, then twice as long.
        assert_eq!(t.attempt(now + secs(1), a), Verdict::Try);
        assert_eq!(t.attempt(now + secs(1), a), Verdict::Wait(secs(2)));
        assert_eq!(t.attempt(now + secs(3), a), Verdict::Try);
        assert_eq!(t.attempt(now + secs(4), a), Verdict::Wait(secs(3)));
    }

    #[test]
    fn another_address_signs_in_while_one_is_held_back() {
        let mut t = Throttle::default();
        let now = Instant::now();
        let attacker = ip("203.0.113.7");
        for s in 0..100 {
            t.attempt(now + secs(s), attacker);
        }
        assert!(matches!(
            t.attempt(now + secs(100), attacker),
            Verdict::Wait(_)
        ));
        let operator = ip("198.51.100.1");
        assert_eq!(t.attempt(now + secs(100), operator), Verdict::Try);
        t.succeeded(operator);
        // Mistyped twice, then right: never waits.
        for _ in 0..2 {
            assert_eq!(t.attempt(now + secs(101), operator), Verdict::Try);
        }
        assert_eq!(t.attempt(now + secs(101), operator), Verdict::Try);
        t.succeeded(operator);
        assert_eq!(t.attempt(now + secs(101), operator), Verdict::Try);
    }

    #[test]
    fn a_right_password_clears_the_address_and_an_hour_forgets_it() {
        let mut t = Throttle::default();
        let now = Instant::now();
        let a = ip("192.0.2.1");
        for _ in 0..3 {
            t.attempt(now, a);
        }
        assert_eq!(t.attempt(now, a), Verdict::Wait(secs(1)));
        t.succeeded(a);
        assert_eq!(t.attempt(now, a), Verdict::Try);

        // An hour after its last try an address starts afresh.
        let b = ip("192.0.2.2");
        for _ in 0..3 {
            t.attempt(now, b);
        }
        assert_eq!(t.attempt(now + secs(1), b), Verdict::Try);
        assert_eq!(t.attempt(now + secs(2), b), Verdict::Wait(secs(1)));
        let later = now + secs(1) + FORGET;
        for _ in 0..3 {
            assert_eq!(t.attempt(later, b), Verdict::Try);
        }
        assert_eq!(t.attempt(later, b), Verdict::Wait(secs(1)));
    }

    #[test]
    fn the_global_bucket_holds_back_repeat_guessers_from_many_addresses_not_newcomers() {
        let mut t = Throttle::default();
        let now = Instant::now();
        let bot = |i: u32| Client::of(IpAddr::V4(std::net::Ipv4Addr::from(0x0a00_0000 + i)));
        // 100 addresses guess once each: the bucket (20) runs dry, but each
        // is new, so each is let through.
        for i in 0..100 {
            assert_eq!(t.attempt(now, bot(i)), Verdict::Try, "bot {i}");
        }
        // Their second guesses wait for the bucket: one a second.
        assert_eq!(t.attempt(now, bot(0)), Verdict::Wait(secs(1)));
        assert_eq!(t.attempt(now + secs(1), bot(0)), Verdict::Try);
        assert!(matches!(t.attempt(now + secs(1), bot(1)), Verdict::Wait(_)));
        // A newcomer is not held back.
        assert_eq!(t.attempt(now + secs(1), ip("198.51.100.1")), Verdict::Try);
    }

    #[test]
    fn beyond_the_addresses_remembered_a_new_one_waits_for_the_bucket() {
        let mut t = Throttle::default();
        let now = Instant::now();
        for i in 0..MAX_CLIENTS as u32 {
            t.attempt(now, Client::of(IpAddr::V4(std::net::Ipv4Addr::from(i))));
        }
        assert_eq!(t.clients.len(), MAX_CLIENTS);
        let new = ip("198.51.100.1");
        assert_eq!(t.attempt(now, new), Verdict::Wait(secs(1)));
        assert_eq!(t.attempt(now + secs(1), new), Verdict::Try);
        assert_eq!(t.clients.len(), MAX_CLIENTS);
        // An hour on, the old records make room again.
        assert_eq!(t.attempt(now + FORGET, new), Verdict::Try);
        assert_eq!(t.clients.len(), 1);
    }

    #[test]
    fn an_ipv6_host_is_one_client_by_its_64_and_a_mapped_ipv4_is_ipv4() {
        assert_eq!(ip("2001:db8:1:2:aaaa::1"), ip("2001:db8:1:2:ffff::9"));
        assert_ne!(ip("2001:db8:1:2::1"), ip("2001:db8:1:3::1"));
        assert_eq!(ip("::ffff:192.0.2.1"), ip("192.0.2.1"));
        assert_eq!(ip("2001:db8:1:2::1").to_string(), "2001:db8:1:2::/64");
    }

    #[test]
    fn the_tally_is_one_line_per_window() {
        let mut tally = Tally::default();
        let now = Instant::now();
        assert_eq!(tally.take(now), None);
        assert!(tally.note(now, ip("192.0.2.1"), Failure::Wrong));
        assert!(!tally.note(now, ip("192.0.2.1"), Failure::Wrong));
        for _ in 0..47 {
            tally.note(now, ip("192.0.2.1"), Failure::Refused);
        }
        tally.note(now, ip("192.0.2.9"), Failure::Wrong);
        let s = tally.take(now + secs(10)).unwrap();
        assert_eq!(
            s.to_string(),
            "3 wrong passwords and 47 refused as too many in 10 s (5.0/s) from 2 addresses, most from 192.0.2.1 (49)"
        );
        assert_eq!(tally.take(now + secs(20)), None);
        assert!(tally.note(now + secs(20), ip("192.0.2.1"), Failure::Wrong));
    }
}
