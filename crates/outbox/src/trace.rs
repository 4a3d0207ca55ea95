//! W3C trace context across the outbox (cargo feature `opentelemetry`).
//!
//! Producer side: [`crate::Outbox::enqueue`] stores the current
//! OpenTelemetry context (the `tracing` span's, through
//! `tracing-opentelemetry`, else [`opentelemetry::Context::current`]) as the
//! event's `traceparent` / `tracestate` headers, unless the caller set a
//! `traceparent`; [`NewEvent::trace_context`] stores an explicit one.
//!
//! Relay side: a relay given a tracer ([`crate::RelayBuilder::tracer`])
//! opens one `publish` span per event whose stored `traceparent` parses, as
//! its child, and hands the publisher a copy of the event whose
//! `traceparent` names that span (`tracestate` as stored). An event without
//! a `traceparent`, or with one that does not parse, gets no span and is
//! published untouched. A relay without a tracer reads no header at all.

use std::borrow::Cow;
use std::collections::BTreeMap;

use opentelemetry::global::{BoxedSpan, BoxedTracer, ObjectSafeTracer};
use opentelemetry::propagation::{Extractor, TextMapPropagator};
use opentelemetry::trace::{
    Span as _, SpanContext, SpanKind, Status, TraceContextExt as _, Tracer,
};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

use crate::event::{Event, NewEvent};
use crate::publisher::Outcome;

/// The W3C header naming the parent span.
pub(crate) const TRACEPARENT: &str = "traceparent";
/// The W3C header carrying vendors' trace state.
pub(crate) const TRACESTATE: &str = "tracestate";

/// `span`'s context as a `traceparent` value (version 00).
fn traceparent(span: &SpanContext) -> String {
    format!(
        "00-{}-{}-{:02x}",
        span.trace_id(),
        span.span_id(),
        span.trace_flags().to_u8()
    )
}

/// Writes `cx`'s span into `headers`: `traceparent`, and `tracestate` when
/// it has one. Returns false (and writes nothing) if `cx` holds no valid
/// span.
fn inject(cx: &Context, headers: &mut BTreeMap<String, String>) -> bool {
    let span = cx.span();
    let span = span.span_context();
    if !span.is_valid() {
        return false;
    }
    headers.insert(TRACEPARENT.to_owned(), traceparent(span));
    let state = span.trace_state().header();
    if state.is_empty() {
        headers.remove(TRACESTATE);
    } else {
        headers.insert(TRACESTATE.to_owned(), state);
    }
    true
}

impl NewEvent {
    /// Stores the span of `cx` as the event's `traceparent` (and
    /// `tracestate`), replacing any set before; a context without a valid
    /// span leaves the headers as they are. Feature `opentelemetry`.
    pub fn trace_context(mut self, cx: &Context) -> Self {
        inject(cx, &mut self.headers);
        self
    }
}

/// The producer's current context: the `tracing` span's (with the
/// `tracing-opentelemetry` layer installed), else OpenTelemetry's own.
fn current_context() -> Context {
    let cx = tracing::Span::current().context();
    if cx.span().span_context().is_valid() {
        cx
    } else {
        Context::current()
    }
}

/// The headers to store for an event: the caller's, plus the current trace
/// context when the caller set no `traceparent` and a span is active.
pub(crate) fn headers_to_store(
    headers: &BTreeMap<String, String>,
) -> Cow<'_, BTreeMap<String, String>> {
    if headers.contains_key(TRACEPARENT) {
        return Cow::Borrowed(headers);
    }
    let mut with = headers.clone();
    if inject(&current_context(), &mut with) {
        Cow::Owned(with)
    } else {
        Cow::Borrowed(headers)
    }
}

/// Reads the W3C headers of a stored event.
struct Headers<'a>(&'a BTreeMap<String, String>);

impl Extractor for Headers<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).map(String::as_str)
    }
    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(String::as_str).collect()
    }
}

/// The relay's tracer: opens `publish` spans as children of stored
/// contexts.
pub(crate) struct PublishTracer {
    tracer: BoxedTracer,
    propagator: TraceContextPropagator,
}

impl std::fmt::Debug for PublishTracer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PublishTracer")
    }
}

/// The `messaging.system` value for a publisher's name (OpenTelemetry's
/// well-known values where there is one).
fn messaging_system(publisher: &str) -> &str {
    match publisher {
        "amqp" => "rabbitmq",
        "sqs" => "aws_sqs",
        "sns" => "aws.sns",
        other => other,
    }
}

/// The publish spans of one call, one slot per event (`None`: not traced).
pub(crate) struct CallSpans(Vec<Option<BoxedSpan>>);

impl PublishTracer {
    pub(crate) fn new<T>(tracer: T) -> Self
    where
        T: Tracer + Send + Sync + 'static,
        T::Span: Send + Sync + 'static,
    {
        let tracer: Box<dyn ObjectSafeTracer + Send + Sync> = Box::new(tracer);
        PublishTracer {
            tracer: BoxedTracer::new(tracer),
            propagator: TraceContextPropagator::new(),
        }
    }

    /// The stored context of `event`, if it has a `traceparent` that
    /// parses.
    fn parent(&self, event: &Event) -> Option<Context> {
        let value = event.headers.get(TRACEPARENT)?;
        let cx = self.propagator.extract(&Headers(&event.headers));
        if cx.span().span_context().is_valid() {
            Some(cx)
        } else {
            tracing::debug!(event_id = %event.id, traceparent = %value.escape_debug(), "malformed traceparent: published as stored, without a publish span");
            None
        }
    }

    /// Opens the publish spans of `call` and returns the events to hand the
    /// publisher: copies whose `traceparent` names their publish span.
    pub(crate) fn start(
        &self,
        publisher: &str,
        destination: impl Fn(&Event) -> Option<String>,
        call: &[Event],
    ) -> (Vec<Event>, CallSpans) {
        let system = messaging_system(publisher);
        let mut spans = Vec::with_capacity(call.len());
        let mut out = Vec::with_capacity(call.len());
        for event in call {
            let mut event = event.clone();
            let span = self.parent(&event).map(|parent| {
                let destination = destination(&event);
                let name = match &destination {
                    Some(d) => format!("publish {d}"),
                    None => "publish".to_owned(),
                };
                let mut attributes = vec![
                    KeyValue::new("messaging.system", system.to_owned()),
                    KeyValue::new("messaging.operation.type", "send"),
                    KeyValue::new("messaging.operation.name", "publish"),
                    KeyValue::new("messaging.message.id", event.id.to_string()),
                    KeyValue::new("outbox.event_type", event.event_type.clone()),
                    KeyValue::new("outbox.aggregate_id", event.aggregate_id.clone()),
                    KeyValue::new("outbox.attempts", i64::from(event.attempts)),
                ];
                if let Some(d) = destination {
                    attributes.push(KeyValue::new("messaging.destination.name", d));
                }
                let span = self
                    .tracer
                    .span_builder(name)
                    .with_kind(SpanKind::Producer)
                    .with_attributes(attributes)
                    .start_with_context(&self.tracer, &parent);
                // The stored `tracestate` travels as it is.
                event
                    .headers
                    .insert(TRACEPARENT.to_owned(), traceparent(span.span_context()));
                span
            });
            spans.push(span);
            out.push(event);
        }
        (out, CallSpans(spans))
    }
}

impl CallSpans {
    /// Ends each span with its event's outcome (missing outcomes are
    /// retried by the relay, and recorded so).
    pub(crate) fn end(self, outcomes: &[Outcome]) {
        for (i, span) in self.0.into_iter().enumerate() {
            if let Some(mut span) = span {
                let (outcome, status) = match outcomes.get(i) {
                    Some(Outcome::Delivered) => ("delivered", Status::Ok),
                    Some(Outcome::Retry(e)) | Some(Outcome::RetryAfter(e, _)) => {
                        ("retry", Status::error(e.clone()))
                    }
                    Some(Outcome::Rejected(e)) => ("rejected", Status::error(e.clone())),
                    Some(Outcome::Unavailable(e)) => ("unavailable", Status::error(e.clone())),
                    None => ("retry", Status::error("the publisher returned no outcome")),
                };
                span.set_attribute(KeyValue::new("outbox.outcome", outcome));
                span.set_status(status);
                span.end();
            }
        }
    }

    /// Ends every span: the transport was down for the whole call.
    pub(crate) fn end_unavailable(self, error: &str) {
        for mut span in self.0.into_iter().flatten() {
            span.set_attribute(KeyValue::new("outbox.outcome", "unavailable"));
            span.set_status(Status::error(error.to_owned()));
            span.end();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry::trace::{SpanId, TraceFlags, TraceId, TraceState};

    fn context(state: &str) -> Context {
        let span = SpanContext::new(
            TraceId::from_hex("4bf92f3577b34da6a3ce929d0e0e4736").unwrap(),
            SpanId::from_hex("00f067aa0ba902b7").unwrap(),
            TraceFlags::SAMPLED,
            true,
            state.parse::<TraceState>().unwrap(),
        );
        Context::new().with_remote_span_context(span)
    }

    #[test]
    fn an_explicit_context_becomes_traceparent_and_tracestate() {
        let e = NewEvent::json("order", "1", "order.created", serde_json::json!({}))
            .trace_context(&context("congo=t61rcWkgMzE"));
        assert_eq!(
            e.headers[TRACEPARENT],
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
        );
        assert_eq!(e.headers[TRACESTATE], "congo=t61rcWkgMzE");
        let plain = NewEvent::json("order", "1", "order.created", serde_json::json!({}))
            .trace_context(&context(""));
        assert!(!plain.headers.contains_key(TRACESTATE));
    }

    #[test]
    fn a_context_without_a_span_leaves_the_headers_alone() {
        let e = NewEvent::json("order", "1", "order.created", serde_json::json!({}))
            .header(TRACEPARENT, "kept")
            .trace_context(&Context::new());
        assert_eq!(e.headers[TRACEPARENT], "kept");
    }

    #[test]
    fn a_caller_set_traceparent_is_stored_as_it_is() {
        let mut headers = BTreeMap::new();
        headers.insert(TRACEPARENT.to_owned(), "not even w3c".to_owned());
        let _attached = context("").attach();
        assert!(matches!(headers_to_store(&headers), Cow::Borrowed(_)));
        let none = BTreeMap::new();
        let stored = headers_to_store(&none);
        assert_eq!(
            stored[TRACEPARENT],
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
        );
    }

    #[test]
    fn no_active_span_stores_nothing() {
        assert!(headers_to_store(&BTreeMap::new()).is_empty());
    }
}
