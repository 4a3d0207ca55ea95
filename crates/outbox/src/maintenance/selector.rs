//! Which dead letters an operation looks at ([`DeadLetterFilter`]) or acts
//! on ([`Selector`]).

use std::fmt;
use std::time::Duration;

use uuid::Uuid;

use super::age::format_age;
use crate::error::{Error, Result};

/// Which dead letters [`DeadLetters::retry`](super::DeadLetters::retry),
/// [`discard`](super::DeadLetters::discard) and
/// [`count`](super::DeadLetters::count) act on. Criteria combine with AND.
///
/// A selector must say what it selects: at least one of `ids`,
/// `aggregate_type`, `aggregate_id` or `event_type`, or `all`. The default
/// selects nothing and is rejected, so an empty selector never touches every
/// dead letter by accident. `all` cannot be combined with those four, but
/// the age bounds narrow any selector, `all` included.
///
/// ```
/// use outbox::Selector;
/// let by_type = Selector::default().event_type("order.created");
/// assert_eq!(by_type.to_string(), "event type order.created");
/// assert!(Selector::default().validate().is_err());
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Selector {
    /// Dead letters with one of these event ids.
    pub ids: Vec<Uuid>,
    /// Dead letters of this aggregate type.
    pub aggregate_type: Option<String>,
    /// Dead letters of this aggregate id.
    pub aggregate_id: Option<String>,
    /// Dead letters of this event type.
    pub event_type: Option<String>,
    /// Only those dead-lettered at least this long ago.
    pub older_than: Option<Duration>,
    /// Only those dead-lettered less than this long ago.
    pub newer_than: Option<Duration>,
    /// Every dead letter (narrowed only by the age bounds).
    pub all: bool,
}

impl Selector {
    /// Every dead letter.
    pub fn all() -> Self {
        Selector {
            all: true,
            ..Selector::default()
        }
    }

    /// The dead letters with these ids.
    pub fn ids(ids: impl IntoIterator<Item = Uuid>) -> Self {
        Selector {
            ids: ids.into_iter().collect(),
            ..Selector::default()
        }
    }

    /// Narrows to one aggregate type.
    pub fn aggregate_type(mut self, aggregate_type: impl Into<String>) -> Self {
        self.aggregate_type = Some(aggregate_type.into());
        self
    }

    /// Narrows to one aggregate id.
    pub fn aggregate_id(mut self, aggregate_id: impl Into<String>) -> Self {
        self.aggregate_id = Some(aggregate_id.into());
        self
    }

    /// Narrows to one event type.
    pub fn event_type(mut self, event_type: impl Into<String>) -> Self {
        self.event_type = Some(event_type.into());
        self
    }

    /// Narrows to dead letters at least `age` old.
    pub fn older_than(mut self, age: Duration) -> Self {
        self.older_than = Some(age);
        self
    }

    /// Narrows to dead letters less than `age` old.
    pub fn newer_than(mut self, age: Duration) -> Self {
        self.newer_than = Some(age);
        self
    }

    fn has_criterion(&self) -> bool {
        !self.ids.is_empty()
            || self.aggregate_type.is_some()
            || self.aggregate_id.is_some()
            || self.event_type.is_some()
    }

    /// Checks that the selector says what it selects; the error names the
    /// choices.
    pub fn validate(&self) -> Result<()> {
        match (self.all, self.has_criterion()) {
            (false, false) => Err(Error::invalid(
                "selector",
                "selects nothing: give ids, an aggregate type, an aggregate id, an event type, \
                 or all",
            )),
            (true, true) => Err(Error::invalid(
                "selector",
                format!("all cannot be combined with {self}: drop all, or the other criteria"),
            )),
            _ => Ok(()),
        }
    }

    /// The same criteria as a listing filter, for previews (dry runs).
    pub fn to_filter(&self, limit: u32) -> DeadLetterFilter {
        DeadLetterFilter {
            selector: self.clone(),
            limit,
        }
    }
}

/// Describes the selection, e.g. `event type order.created, aggregate id 42`
/// or `all`.
impl fmt::Display for Selector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts = Vec::new();
        if self.all {
            parts.push("all".to_owned());
        }
        match self.ids.len() {
            0 => {}
            1 => parts.push(format!("id {}", self.ids[0])),
            2..=3 => parts.push(format!(
                "ids {}",
                self.ids
                    .iter()
                    .map(Uuid::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            )),
            n => parts.push(format!("{n} ids")),
        }
        if let Some(v) = &self.aggregate_type {
            parts.push(format!("aggregate type {v}"));
        }
        if let Some(v) = &self.aggregate_id {
            parts.push(format!("aggregate id {v}"));
        }
        if let Some(v) = &self.event_type {
            parts.push(format!("event type {v}"));
        }
        if let Some(d) = self.older_than {
            parts.push(format!("dead-lettered over {} ago", format_age(d)));
        }
        if let Some(d) = self.newer_than {
            parts.push(format!("dead-lettered within the last {}", format_age(d)));
        }
        if parts.is_empty() {
            f.write_str("nothing")
        } else {
            f.write_str(&parts.join(", "))
        }
    }
}

/// What [`DeadLetters::list`](super::DeadLetters::list) shows: the dead
/// letters a [`Selector`] picks, at most `limit` of them. Listing needs no
/// criterion: the default lists the first 100 dead letters (the selector's
/// `all` flag changes nothing here).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeadLetterFilter {
    /// Which dead letters; criteria combine with AND.
    pub selector: Selector,
    /// Most dead letters returned, in seq order (1 to
    /// [`MAX_LIST_LIMIT`]).
    pub limit: u32,
}

/// Default of [`DeadLetterFilter::limit`].
pub const DEFAULT_LIST_LIMIT: u32 = 100;
/// Largest [`DeadLetterFilter::limit`].
pub const MAX_LIST_LIMIT: u32 = 100_000;

impl Default for DeadLetterFilter {
    fn default() -> Self {
        DeadLetterFilter {
            selector: Selector::default(),
            limit: DEFAULT_LIST_LIMIT,
        }
    }
}

impl DeadLetterFilter {
    /// Checks the limit; the error names the field, the value and the range.
    pub fn validate(&self) -> Result<()> {
        if self.limit == 0 || self.limit > MAX_LIST_LIMIT {
            return Err(Error::invalid(
                "limit",
                format!("{} is out of range: use 1 to {MAX_LIST_LIMIT}", self.limit),
            ));
        }
        Ok(())
    }
}

/// The criteria as bind parameters `$1`–`$6` of the shared predicate in
/// `maintenance::queries`.
pub(crate) struct Criteria<'a> {
    pub ids: Option<&'a [Uuid]>,
    pub aggregate_type: Option<&'a str>,
    pub aggregate_id: Option<&'a str>,
    pub event_type: Option<&'a str>,
    pub older_than_ms: Option<i64>,
    pub newer_than_ms: Option<i64>,
}

impl<'a> Criteria<'a> {
    pub(crate) fn of(s: &'a Selector) -> Self {
        Criteria {
            ids: (!s.ids.is_empty()).then_some(s.ids.as_slice()),
            aggregate_type: s.aggregate_type.as_deref(),
            aggregate_id: s.aggregate_id.as_deref(),
            event_type: s.event_type.as_deref(),
            older_than_ms: s.older_than.map(millis),
            newer_than_ms: s.newer_than.map(millis),
        }
    }

    /// Binds `$1`–`$6` in order.
    pub(crate) fn bind<'q>(
        &self,
        q: sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments>,
    ) -> sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments>
    where
        'a: 'q,
    {
        q.bind(self.ids)
            .bind(self.aggregate_type)
            .bind(self.aggregate_id)
            .bind(self.event_type)
            .bind(self.older_than_ms)
            .bind(self.newer_than_ms)
    }
}

/// A duration in whole milliseconds, saturating.
pub(crate) fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_selector_must_say_what_it_selects() {
        let err = Selector::default().validate().unwrap_err().to_string();
        assert!(err.contains("selector") && err.contains("all"), "{err}");
        let err = Selector::all()
            .event_type("x")
            .validate()
            .unwrap_err()
            .to_string();
        assert!(err.contains("event type x"), "{err}");
        Selector::all()
            .older_than(Duration::from_secs(60))
            .validate()
            .unwrap();
        Selector::default().aggregate_id("42").validate().unwrap();
    }

    #[test]
    fn selectors_describe_themselves() {
        let s = Selector::default()
            .aggregate_type("order")
            .event_type("order.created")
            .older_than(Duration::from_secs(7_200));
        assert_eq!(
            s.to_string(),
            "aggregate type order, event type order.created, dead-lettered over 2h ago"
        );
        assert_eq!(Selector::ids([Uuid::nil(); 5]).to_string(), "5 ids");
        assert_eq!(format_age(Duration::from_secs(93_600)), "1d2h");
    }

    #[test]
    fn the_limit_is_checked() {
        DeadLetterFilter::default().validate().unwrap();
        let err = DeadLetterFilter {
            limit: 0,
            ..Default::default()
        }
        .validate()
        .unwrap_err()
        .to_string();
        assert!(err.contains("limit") && err.contains('0'), "{err}");
    }
}
