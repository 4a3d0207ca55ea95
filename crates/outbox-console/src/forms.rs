//! Reading query strings and forms into the store's criteria, with an
//! error that names the field and says what to write. No database, no I/O.

use chrono::{DateTime, NaiveDate, NaiveDateTime, Utc};
use outbox::Selector;
use uuid::Uuid;

use super::store::EventQuery;
use outbox::parse_age;

/// Decoded `name=value` pairs, in order.
#[derive(Debug, Clone, Default)]
pub struct Params(pub Vec<(String, String)>);

impl Params {
    pub fn parse(encoded: &str) -> Self {
        Params(
            form_urlencoded::parse(encoded.as_bytes())
                .into_owned()
                .collect(),
        )
    }

    /// The first value of `name`, trimmed; `None` when absent or blank.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.trim())
            .filter(|v| !v.is_empty())
    }

    /// Every non-blank value of `name`.
    pub fn all(&self, name: &str) -> Vec<&str> {
        self.0
            .iter()
            .filter(|(k, v)| k == name && !v.trim().is_empty())
            .map(|(_, v)| v.trim())
            .collect()
    }

    fn owned(&self, name: &str) -> Option<String> {
        self.get(name).map(str::to_owned)
    }

    /// Refuses a field whose value PostgreSQL cannot store in `text` (a NUL
    /// byte, `%00`), naming the field, before any of it reaches a
    /// statement: the database would refuse it with an error, not a match.
    pub fn storable(&self) -> Result<(), FieldError> {
        match self.0.iter().find(|(_, v)| v.contains('\0')) {
            None => Ok(()),
            Some((k, _)) => {
                let shown: String = k.chars().take(40).flat_map(char::escape_debug).collect();
                Err(FieldError {
                    field: shown.into(),
                    message: "holds a NUL byte (%00), which no stored text can contain: remove it"
                        .into(),
                })
            }
        }
    }
}

/// A form field that could not be read, and how to write it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    pub field: std::borrow::Cow<'static, str>,
    pub message: String,
}

impl std::fmt::Display for FieldError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

fn bad(field: &'static str, message: impl Into<String>) -> FieldError {
    FieldError {
        field: field.into(),
        message: message.into(),
    }
}

/// The keyset position `after` (a seq), 0 when absent.
pub fn after(p: &Params) -> Result<i64, FieldError> {
    match p.get("after") {
        None => Ok(0),
        Some(v) => v
            .parse::<i64>()
            .ok()
            .filter(|n| *n >= 0)
            .ok_or_else(|| bad("after", "must be a sequence number (0 or more)")),
    }
}

/// An event id, if one is given.
pub fn event_id(p: &Params) -> Result<Option<Uuid>, FieldError> {
    p.get("id")
        .map(|v| Uuid::parse_str(v).map_err(|_| bad("id", "is not an event id (a UUID)")))
        .transpose()
}

/// A time: RFC 3339, or `YYYY-MM-DDTHH:MM[:SS]` / `YYYY-MM-DD` in UTC (what
/// a browser's date and time inputs send).
pub fn time(field: &'static str, text: &str) -> Result<DateTime<Utc>, FieldError> {
    if let Ok(t) = DateTime::parse_from_rfc3339(text) {
        return Ok(t.with_timezone(&Utc));
    }
    for form in [
        "%Y-%m-%dT%H:%M:%S",
        "%Y-%m-%dT%H:%M",
        "%Y-%m-%d %H:%M:%S",
        "%Y-%m-%d %H:%M",
    ] {
        if let Ok(t) = NaiveDateTime::parse_from_str(text, form) {
            return Ok(t.and_utc());
        }
    }
    if let Ok(d) = NaiveDate::parse_from_str(text, "%Y-%m-%d") {
        return Ok(d.and_hms_opt(0, 0, 0).expect("midnight exists").and_utc());
    }
    Err(bad(
        field,
        "is not a time: write 2026-01-31, 2026-01-31T14:05 (UTC) or RFC 3339",
    ))
}

/// The event search of a query string.
pub fn event_query(p: &Params) -> Result<EventQuery, FieldError> {
    let state = p.owned("state");
    if let Some(s) = &state {
        if !["pending", "retrying", "processed", "dead"].contains(&s.as_str()) {
            return Err(bad("state", "must be pending, retrying, processed or dead"));
        }
    }
    let from = p.get("from").map(|t| time("from", t)).transpose()?;
    let to = p.get("to").map(|t| time("to", t)).transpose()?;
    if let (Some(f), Some(t)) = (from, to) {
        if f >= t {
            return Err(bad("to", "must be later than from"));
        }
    }
    Ok(EventQuery {
        aggregate_type: p.owned("aggregate_type"),
        aggregate_id: p.owned("aggregate_id"),
        event_type: p.owned("event_type"),
        from,
        to,
        state,
        after: after(p)?,
    })
}

/// The dead-letter filter of a query string or form, as a library
/// selector without `all` (a filter that names nothing lists everything).
pub fn dead_letter_filter(p: &Params) -> Result<Selector, FieldError> {
    let age = |field: &'static str| {
        p.get(field)
            .map(|v| parse_age(v).map_err(|e| bad(field, e)))
            .transpose()
    };
    Ok(Selector {
        aggregate_type: p.owned("aggregate_type"),
        aggregate_id: p.owned("aggregate_id"),
        event_type: p.owned("event_type"),
        older_than: age("older_than")?,
        newer_than: age("newer_than")?,
        ..Selector::default()
    })
}

/// The dead-letter filter's error text (the last error contains it,
/// case-insensitively), if any.
pub fn error_text(p: &Params) -> Result<Option<String>, FieldError> {
    match p.get("error") {
        Some(e) if e.chars().count() > 200 => Err(bad("error", "is longer than 200 characters")),
        e => Ok(e.map(str::to_owned)),
    }
}

/// A dead-letter action.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    Retry,
    Discard,
}

impl Action {
    pub fn verb(self) -> &'static str {
        match self {
            Action::Retry => "retry",
            Action::Discard => "discard",
        }
    }
}

/// What a dead-letter action form asks for: the action and the library
/// selector it runs with. `scope=selected` takes the ticked ids (their
/// filter narrows nothing: the ids were chosen from it); `scope=matching`
/// takes every dead letter the filter matches (`all` when the filter names
/// nothing but ages).
pub fn dead_letter_action(p: &Params) -> Result<(Action, Selector), FieldError> {
    let action = match p.get("action") {
        Some("retry") => Action::Retry,
        Some("discard") => Action::Discard,
        _ => return Err(bad("action", "must be retry or discard")),
    };
    let filter = dead_letter_filter(p)?;
    let selector = match p.get("scope") {
        Some("selected") => {
            let ids = p
                .all("id")
                .into_iter()
                .map(|v| Uuid::parse_str(v).map_err(|_| bad("id", "is not an event id (a UUID)")))
                .collect::<Result<Vec<_>, _>>()?;
            if ids.is_empty() {
                return Err(bad(
                    "id",
                    "tick at least one dead letter, or choose all matching",
                ));
            }
            Selector::ids(ids)
        }
        Some("matching") => {
            let named = filter.aggregate_type.is_some()
                || filter.aggregate_id.is_some()
                || filter.event_type.is_some();
            Selector {
                all: !named,
                ..filter
            }
        }
        _ => return Err(bad("scope", "must be selected or matching")),
    };
    Ok((action, selector))
}

/// A pause scope: `Some(type)` or `None` for the whole outbox.
pub fn pause_scope(p: &Params) -> Result<Option<String>, FieldError> {
    match p.get("scope") {
        Some("all") => Ok(None),
        Some("type") => match p.get("aggregate_type") {
            Some(t) if t.chars().count() <= 100 => Ok(Some(t.to_owned())),
            Some(_) => Err(bad("aggregate_type", "is longer than 100 characters")),
            None => Err(bad(
                "aggregate_type",
                "name the aggregate type to pause or resume",
            )),
        },
        _ => Err(bad("scope", "must be all or type")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn p(s: &str) -> Params {
        Params::parse(s)
    }

    #[test]
    fn selected_dead_letters_are_acted_on_by_id_and_need_one() {
        let id = Uuid::new_v4();
        let (a, s) = dead_letter_action(&p(&format!(
            "action=retry&scope=selected&id={id}&aggregate_type=order"
        )))
        .unwrap();
        assert_eq!(a, Action::Retry);
        assert_eq!(s, Selector::ids([id]));
        let e = dead_letter_action(&p("action=retry&scope=selected")).unwrap_err();
        assert_eq!(e.field, "id");
        let e = dead_letter_action(&p("action=retry&scope=selected&id=nope")).unwrap_err();
        assert_eq!(e.field, "id");
    }

    #[test]
    fn all_matching_takes_the_filter_and_an_empty_filter_means_all() {
        let (a, s) = dead_letter_action(&p(
            "action=discard&scope=matching&event_type=x&older_than=1h",
        ))
        .unwrap();
        assert_eq!(a, Action::Discard);
        assert_eq!(
            s,
            Selector::default()
                .event_type("x")
                .older_than(Duration::from_secs(3600))
        );
        assert!(s.validate().is_ok());
        let (_, s) = dead_letter_action(&p("action=retry&scope=matching&newer_than=2d")).unwrap();
        assert!(s.all && s.validate().is_ok());
    }

    #[test]
    fn bad_fields_are_named() {
        assert_eq!(
            dead_letter_action(&p("action=drop&scope=matching"))
                .unwrap_err()
                .field,
            "action"
        );
        assert_eq!(
            dead_letter_action(&p("action=retry")).unwrap_err().field,
            "scope"
        );
        assert_eq!(
            dead_letter_filter(&p("older_than=soon")).unwrap_err().field,
            "older_than"
        );
        assert_eq!(event_query(&p("state=gone")).unwrap_err().field, "state");
        assert_eq!(event_query(&p("from=yesterday")).unwrap_err().field, "from");
        assert_eq!(
            event_query(&p("from=2026-02-01&to=2026-01-01"))
                .unwrap_err()
                .field,
            "to"
        );
        assert_eq!(after(&p("after=-1")).unwrap_err().field, "after");
        assert_eq!(event_id(&p("id=1")).unwrap_err().field, "id");
        assert_eq!(
            pause_scope(&p("scope=type")).unwrap_err().field,
            "aggregate_type"
        );
    }

    #[test]
    fn times_read_as_browsers_send_them_in_utc() {
        let t = |s| time("from", s).unwrap().to_rfc3339();
        assert_eq!(t("2026-01-31"), "2026-01-31T00:00:00+00:00");
        assert_eq!(t("2026-01-31T14:05"), "2026-01-31T14:05:00+00:00");
        assert_eq!(t("2026-01-31T14:05:00+02:00"), "2026-01-31T12:05:00+00:00");
    }

    #[test]
    fn blank_fields_are_absent() {
        let q = event_query(&p("aggregate_type=+&aggregate_id=a%2Fb&after=")).unwrap();
        assert_eq!(q.aggregate_type, None);
        assert_eq!(q.aggregate_id.as_deref(), Some("a/b"));
        assert_eq!(q.after, 0);
        assert_eq!(pause_scope(&p("scope=all")).unwrap(), None);
    }

    #[test]
    fn a_nul_byte_in_any_field_is_refused_naming_the_field() {
        assert!(p("aggregate_type=order&after=3").storable().is_ok());
        let e = p("after=1&aggregate_type=a%00b").storable().unwrap_err();
        assert_eq!(e.field, "aggregate_type");
        assert!(e.message.contains("NUL"), "{e}");
        let e = p("a%00b=x%00").storable().unwrap_err();
        assert_eq!(e.field, "a\\0b");
    }
}
