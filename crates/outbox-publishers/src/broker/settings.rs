//! What the brokers' settings share: the error that names the broker, the
//! field, its value and the fix; the range checks every publisher makes of
//! its timeouts and sizes; and a `Debug` that redacts secrets.

use std::fmt;
use std::ops::RangeInclusive;

use crate::Error;

/// The checks of one broker's settings. Every failure is an
/// [`Error::Invalid`] naming the broker, the field, its value and the fix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Settings {
    broker: &'static str,
}

impl Settings {
    /// The settings of `broker`, e.g. `kafka`.
    pub(crate) const fn of(broker: &'static str) -> Self {
        Settings { broker }
    }

    /// `field` cannot be `value`: `fix` says why and what to set instead.
    pub(crate) fn invalid(
        self,
        field: impl Into<String>,
        value: impl fmt::Display,
        fix: impl Into<String>,
    ) -> Error {
        Error::invalid(self.broker, field, value, fix)
    }

    /// `Ok` if `value` of `field` is within `allowed`, else the error with
    /// `fix`.
    pub(crate) fn within<T: PartialOrd + fmt::Display>(
        self,
        field: &str,
        value: T,
        allowed: RangeInclusive<T>,
        fix: &str,
    ) -> Result<(), Error> {
        if allowed.contains(&value) {
            Ok(())
        } else {
            Err(self.invalid(field, value, fix))
        }
    }

    /// Checks `field`, a list of `HOST:PORT` addresses of a `what` (e.g.
    /// `broker`) each, `example` being one: the list names at least one,
    /// and each has a host that `host_ok` accepts and a port from 1 to
    /// 65535. A refused address is shown as `shown` makes it.
    // The NATS and Kafka publishers take such lists.
    #[allow(dead_code)]
    pub(crate) fn host_ports(
        self,
        field: &str,
        addresses: &[String],
        (what, example): (&str, &str),
        host_ok: impl Fn(&str) -> bool,
        shown: impl Fn(&str) -> String,
    ) -> Result<(), Error> {
        if addresses.is_empty() {
            let fix = format!("name at least one {what} as HOST:PORT, e.g. [\"{example}\"]");
            return Err(self.invalid(field, "[] (empty)", fix));
        }
        let valid = |address: &str| {
            address.rsplit_once(':').is_some_and(|(host, port)| {
                !host.is_empty() && host_ok(host) && port.parse::<u16>().is_ok_and(|p| p > 0)
            })
        };
        match addresses.iter().find(|a| !valid(a)) {
            Some(refused) => Err(self.invalid(
                field,
                shown(refused),
                format!("each {what} is HOST:PORT with a port from 1 to 65535, e.g. {example}"),
            )),
            None => Ok(()),
        }
    }

    /// A timeout of connecting or of a health check: 100 ms to 10 minutes.
    // Unused when the webhook publisher, which has none, is built alone.
    #[allow(dead_code)]
    pub(crate) fn connect_timeout(self, field: &str, value_ms: u64) -> Result<(), Error> {
        self.within(field, value_ms, 100..=600_000, "use 100 to 600000")
    }

    /// A timeout that bounds one publish call, within `allowed`: it has to
    /// end before the relay's own `publish_timeout_ms` does, so that the
    /// publisher can say what failed before the relay gives up on the call.
    pub(crate) fn publish_timeout(
        self,
        field: &str,
        value_ms: u64,
        allowed: RangeInclusive<u64>,
    ) -> Result<(), Error> {
        let fix = format!(
            "use {} to {}, and keep it below the relay's publish_timeout_ms",
            allowed.start(),
            allowed.end()
        );
        self.within(field, value_ms, allowed, &fix)
    }
}

/// `Some("***")` for a set secret, `None` for an unset one: how `Debug`
/// shows a secret setting.
#[cfg(any(feature = "nats", feature = "http"))]
pub(crate) fn hidden(secret: &Option<String>) -> Option<&'static str> {
    secret.as_ref().map(|_| outbox::redact::REDACTED)
}

/// `Debug` for a settings struct `$name`: every field in the order given,
/// each shown as it is, but a field written `field => show`, which shows
/// `show(&self.field)` instead (a secret redacted).
// Unused when the SQS and SNS publishers are built alone.
#[allow(unused_macros)]
macro_rules! settings_debug {
    ($name:ident { $($field:ident $(=> $show:expr)?),+ $(,)? }) => {
        impl std::fmt::Debug for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.debug_struct(stringify!($name))
                    $(.field(
                        stringify!($field),
                        &$crate::broker::settings::settings_debug!(@shown self.$field $(, $show)?),
                    ))+
                    .finish()
            }
        }
    };
    (@shown $value:expr) => {
        $value
    };
    (@shown $value:expr, $show:expr) => {
        $show(&$value)
    };
}
#[allow(unused_imports)]
pub(crate) use settings_debug;

/// Asserts that `checked` (what a `validate` said) is an error whose
/// message says each of `needles`.
#[cfg(test)]
#[track_caller]
pub(crate) fn assert_refused(checked: Result<(), Error>, needles: &[&str]) {
    let e = checked.expect_err("the settings were accepted").to_string();
    for needle in needles {
        assert!(e.contains(needle), "{needle:?} is not in: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEST: Settings = Settings::of("test");

    #[test]
    fn checks_name_the_broker_field_value_and_fix() {
        TEST.within("n", 5, 1..=5, "use 1 to 5").unwrap();
        let e = TEST.within("n", 6, 1..=5, "use 1 to 5").unwrap_err();
        assert_eq!(e.to_string(), "invalid test setting n = 6: use 1 to 5");
        let ok = |host: &str| !host.contains('/');
        TEST.host_ports("hosts", &["h:1".into()], ("host", "h:1"), ok, str::to_owned)
            .unwrap();
        for (list, shown) in [
            (vec![], "[] (empty)"),
            (vec!["h:1".into(), "h/x:1".into()], "h/x:1"),
        ] {
            let e = TEST
                .host_ports("hosts", &list, ("host", "h:1"), ok, str::to_owned)
                .unwrap_err();
            assert!(
                e.to_string()
                    .starts_with(&format!("invalid test setting hosts = {shown}: ")),
                "{e}"
            );
        }
        let e = TEST.connect_timeout("connect_timeout_ms", 99).unwrap_err();
        assert_eq!(
            e.to_string(),
            "invalid test setting connect_timeout_ms = 99: use 100 to 600000"
        );
        let e = TEST
            .publish_timeout("timeout_ms", 3_600_001, 1_000..=3_600_000)
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "invalid test setting timeout_ms = 3600001: use 1000 to 3600000, and keep it below \
             the relay's publish_timeout_ms"
        );
    }
}
