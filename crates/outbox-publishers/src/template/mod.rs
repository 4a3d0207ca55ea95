//! Destination templates: one syntax for every publisher's destination
//! (Kafka topic, AMQP routing key, NATS subject, Redis stream key, HTTP
//! URL).
//!
//! A template is literal text with placeholders:
//!
//! | placeholder | filled in with |
//! | --- | --- |
//! | `{aggregate_type}` | the event's aggregate type |
//! | `{event_type}` | the event's type |
//! | `{aggregate_id}` | the event's aggregate id |
//! | `{header.NAME}` | the value of the producer's header `NAME`; an event without it is rejected (dead-lettered) |
//! | `{header.NAME:-DEFAULT}` | the header's value, or `DEFAULT` when the event has no such header or it is empty |
//! | `{{` and `}}` | a literal `{` and `}` |
//!
//! The HTTP publisher's URL also takes `{topic}` (the event's topic
//! override, or its type). A template is parsed once, when the publisher is
//! configured; rendering one allocates at most one string, sized up front.

use std::borrow::Cow;
use std::fmt;

use outbox::Event;

/// A field of the event a placeholder stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Field {
    AggregateType,
    EventType,
    AggregateId,
    /// The topic override, or the event type (HTTP URLs only).
    Topic,
}

impl Field {
    fn name(self) -> &'static str {
        match self {
            Field::AggregateType => "aggregate_type",
            Field::EventType => "event_type",
            Field::AggregateId => "aggregate_id",
            Field::Topic => "topic",
        }
    }

    fn value(self, event: &Event) -> &str {
        match self {
            Field::AggregateType => &event.aggregate_type,
            Field::EventType => &event.event_type,
            Field::AggregateId => &event.aggregate_id,
            Field::Topic => event.topic.as_deref().unwrap_or(&event.event_type),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Segment {
    Literal(String),
    Field(Field),
    Header {
        name: String,
        default: Option<String>,
    },
}

/// One piece of a rendered template: literal text, or a placeholder's
/// value (`name` is the placeholder without braces, e.g. `header.tenant`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Piece<'a> {
    Literal(&'a str),
    Value { name: &'a str, value: &'a str },
}

/// A destination template, parsed.
///
/// ```
/// use outbox_publishers::Template;
/// let t = Template::parse("topic_template", "outbox.{aggregate_type}.{header.tenant:-shared}").unwrap();
/// assert_eq!(t.as_str(), "outbox.{aggregate_type}.{header.tenant:-shared}");
/// let e = Template::parse("subject", "outbox.{aggregate}").unwrap_err();
/// assert!(e.to_string().contains("unknown placeholder {aggregate}"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template {
    field: &'static str,
    source: String,
    segments: Vec<Segment>,
    /// Bytes of literal text, to size the rendered string.
    literal_len: usize,
}

impl Template {
    /// Parses `source`, the value of setting `field` (named in errors).
    pub fn parse(field: &'static str, source: &str) -> Result<Template, TemplateError> {
        Self::parse_as(field, source, false)
    }

    /// [`Template::parse`] for an HTTP URL, which also takes `{topic}`.
    #[cfg_attr(not(feature = "http"), allow(dead_code))]
    pub(crate) fn parse_url(field: &'static str, source: &str) -> Result<Template, TemplateError> {
        Self::parse_as(field, source, true)
    }

    fn parse_as(field: &'static str, source: &str, topic: bool) -> Result<Template, TemplateError> {
        let fail = |problem| TemplateError {
            field,
            topic,
            problem,
        };
        let mut segments = Vec::new();
        let mut literal = String::new();
        let mut rest = source;
        while let Some(at) = rest.find(['{', '}']) {
            literal.push_str(&rest[..at]);
            let brace = rest.as_bytes()[at];
            if rest.as_bytes().get(at + 1) == Some(&brace) {
                literal.push(char::from(brace));
                rest = &rest[at + 2..];
                continue;
            }
            if brace == b'}' {
                return Err(fail(Problem::Unopened));
            }
            let Some(len) = rest[at + 1..].find('}') else {
                return Err(fail(Problem::Unclosed));
            };
            let inner = &rest[at + 1..at + 1 + len];
            if inner.contains('{') {
                return Err(fail(Problem::Unclosed));
            }
            let segment = match inner {
                "aggregate_type" => Segment::Field(Field::AggregateType),
                "event_type" => Segment::Field(Field::EventType),
                "aggregate_id" => Segment::Field(Field::AggregateId),
                "topic" if topic => Segment::Field(Field::Topic),
                _ => match inner.strip_prefix("header.") {
                    Some(header) => {
                        let (name, default) = match header.split_once(":-") {
                            Some((name, default)) => (name, Some(default.to_owned())),
                            None => (header, None),
                        };
                        if name.is_empty() {
                            return Err(fail(Problem::Unknown(inner.to_owned())));
                        }
                        Segment::Header {
                            name: name.to_owned(),
                            default,
                        }
                    }
                    None => return Err(fail(Problem::Unknown(inner.to_owned()))),
                },
            };
            if !literal.is_empty() {
                segments.push(Segment::Literal(std::mem::take(&mut literal)));
            }
            segments.push(segment);
            rest = &rest[at + 2 + len..];
        }
        literal.push_str(rest);
        if !literal.is_empty() || segments.is_empty() {
            segments.push(Segment::Literal(literal));
        }
        let literal_len = segments
            .iter()
            .map(|s| match s {
                Segment::Literal(text) => text.len(),
                _ => 0,
            })
            .sum();
        Ok(Template {
            field,
            source: source.to_owned(),
            segments,
            literal_len,
        })
    }

    /// Parses setting `field` of publisher `broker`, as its `validate`
    /// does, and holds the template with every placeholder filled by one
    /// character against the broker's naming rules (`names` says what is
    /// wrong, and the fix). The error names the publisher, the setting and
    /// the fix.
    #[cfg_attr(
        not(any(
            feature = "kafka",
            feature = "amqp",
            feature = "nats",
            feature = "redis"
        )),
        allow(dead_code)
    )]
    pub(crate) fn setting(
        broker: &'static str,
        field: &'static str,
        source: &str,
        names: impl FnOnce(&str) -> Result<(), String>,
    ) -> Result<Template, crate::Error> {
        let shown = if source.is_empty() { "\"\"" } else { source };
        let invalid = |fix: String| crate::Error::invalid(broker, field, shown, fix);
        let template = Template::parse(field, source).map_err(|e| invalid(e.to_string()))?;
        names(&template.sample("x")).map_err(invalid)?;
        Ok(template)
    }

    /// The template as written.
    pub fn as_str(&self) -> &str {
        &self.source
    }

    /// Whether the template has no placeholder.
    pub fn is_literal(&self) -> bool {
        matches!(self.segments.as_slice(), [Segment::Literal(_)])
    }

    /// The template with every placeholder replaced by `fill`: what
    /// start-up checks hold against the broker's naming rules.
    pub fn sample(&self, fill: &str) -> String {
        self.segments
            .iter()
            .map(|s| match s {
                Segment::Literal(text) => text.as_str(),
                _ => fill,
            })
            .collect()
    }

    /// The literal text before the first placeholder (all of it when there
    /// is none).
    #[cfg_attr(not(feature = "http"), allow(dead_code))]
    pub(crate) fn prefix(&self) -> &str {
        match self.segments.first() {
            Some(Segment::Literal(text)) => text,
            _ => "",
        }
    }

    /// The destination of `event`: its topic override when set, else the
    /// template filled in.
    pub fn destination<'a>(&'a self, event: &'a Event) -> Result<Cow<'a, str>, MissingHeader> {
        match &event.topic {
            Some(topic) => Ok(Cow::Borrowed(topic)),
            None => self.render(event),
        }
    }

    /// The template filled in with `event`'s values, in one string sized
    /// up front (borrowed when the template has no placeholder).
    pub fn render<'a>(&'a self, event: &'a Event) -> Result<Cow<'a, str>, MissingHeader> {
        if let [Segment::Literal(text)] = self.segments.as_slice() {
            return Ok(Cow::Borrowed(text));
        }
        let mut len = self.literal_len;
        self.try_for_each(event, |piece| {
            if let Piece::Value { value, .. } = piece {
                len += value.len();
            }
            Ok::<(), MissingHeader>(())
        })?;
        let mut out = String::with_capacity(len);
        self.try_for_each(event, |piece| {
            out.push_str(match piece {
                Piece::Literal(text) => text,
                Piece::Value { value, .. } => value,
            });
            Ok::<(), MissingHeader>(())
        })?;
        Ok(Cow::Owned(out))
    }

    /// Hands each piece of the rendered template to `f`, in order.
    pub(crate) fn try_for_each<'a, E: From<MissingHeader>>(
        &'a self,
        event: &'a Event,
        mut f: impl FnMut(Piece<'a>) -> Result<(), E>,
    ) -> Result<(), E> {
        for segment in &self.segments {
            let piece = match segment {
                Segment::Literal(text) => Piece::Literal(text),
                Segment::Field(field) => Piece::Value {
                    name: field.name(),
                    value: field.value(event),
                },
                Segment::Header { name, default } => {
                    let value = match (event.headers.get(name), default) {
                        (Some(v), Some(d)) if v.is_empty() => d.as_str(),
                        (Some(v), _) => v.as_str(),
                        (None, Some(d)) => d.as_str(),
                        (None, None) => {
                            return Err(MissingHeader {
                                field: self.field,
                                header: name.clone(),
                                template: self.source.clone(),
                            }
                            .into())
                        }
                    };
                    Piece::Value { name, value }
                }
            };
            f(piece)?;
        }
        Ok(())
    }
}

impl fmt::Display for Template {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.source)
    }
}

/// Why a template cannot be parsed; its text names the placeholder and
/// lists the valid ones.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TemplateError {
    field: &'static str,
    topic: bool,
    problem: Problem,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Problem {
    Unknown(String),
    Unclosed,
    Unopened,
}

impl TemplateError {
    /// The setting whose template this is.
    pub fn field(&self) -> &'static str {
        self.field
    }

    /// The unknown placeholder, without braces, when that is the problem.
    pub fn placeholder(&self) -> Option<&str> {
        match &self.problem {
            Problem::Unknown(name) => Some(name),
            _ => None,
        }
    }
}

impl fmt::Display for TemplateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.problem {
            Problem::Unknown(name) => write!(f, "unknown placeholder {{{name}}}")?,
            Problem::Unclosed => f.write_str("has a { without its }")?,
            Problem::Unopened => f.write_str("has a } without its {")?,
        }
        f.write_str("; the placeholders are {aggregate_type}, {event_type}, {aggregate_id}, ")?;
        if self.topic {
            f.write_str("{topic}, ")?;
        }
        f.write_str("{header.NAME} and {header.NAME:-DEFAULT}; write {{ or }} for a literal brace")
    }
}

impl std::error::Error for TemplateError {}

/// An event lacks a header its destination template needs (and the
/// placeholder gives no default): the event is rejected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MissingHeader {
    field: &'static str,
    header: String,
    template: String,
}

impl MissingHeader {
    /// The header the event lacks.
    pub fn header(&self) -> &str {
        &self.header
    }
}

impl fmt::Display for MissingHeader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = &self.header;
        write!(
            f,
            "the event has no header {name:?}, which {} = {} needs; add it when enqueueing, set the event's topic, or give a default: {{header.{name}:-DEFAULT}}",
            self.field, self.template
        )
    }
}

impl std::error::Error for MissingHeader {}

impl From<MissingHeader> for String {
    fn from(missing: MissingHeader) -> String {
        missing.to_string()
    }
}

#[cfg(test)]
mod tests;
