//! Unit tests of the parent module.

use super::*;
use crate::test_support::event;

fn render(template: &str, event: &Event) -> Result<String, String> {
    let t = Template::parse("topic_template", template).map_err(|e| e.to_string())?;
    t.render(event)
        .map(Cow::into_owned)
        .map_err(|e| e.to_string())
}

#[test]
fn every_placeholder_is_filled_in() {
    let e = event("42", &[("tenant", "acme")]);
    assert_eq!(
        render(
            "{aggregate_type}/{event_type}/{aggregate_id}/{header.tenant}",
            &e
        )
        .unwrap(),
        "order/order.created/42/acme"
    );
    assert_eq!(render("{aggregate_id}", &e).unwrap(), "42");
}

#[test]
fn the_defaults_of_every_publisher_render_as_before() {
    let e = event("42", &[]);
    for (template, expected) in [
        ("outbox.event.{aggregate_type}", "outbox.event.order"),
        ("{event_type}", "order.created"),
        (
            "outbox.{aggregate_type}.{event_type}",
            "outbox.order.order.created",
        ),
        ("outbox:{aggregate_type}", "outbox:order"),
    ] {
        assert_eq!(render(template, &e).unwrap(), expected, "{template}");
    }
}

#[test]
fn a_literal_template_is_borrowed_and_a_rendered_one_sized_exactly() {
    let e = event("42", &[("tenant", "acme")]);
    let t = Template::parse("stream", "plain").unwrap();
    assert!(t.is_literal());
    assert!(matches!(t.render(&e).unwrap(), Cow::Borrowed("plain")));
    let t = Template::parse("stream", "a.{header.tenant}.{aggregate_id}.b").unwrap();
    let Cow::Owned(s) = t.render(&e).unwrap() else {
        panic!("a filled-in template is a new string")
    };
    assert_eq!((s.as_str(), s.capacity()), ("a.acme.42.b", s.len()));
}

#[test]
fn the_topic_override_wins_over_the_template() {
    let mut e = event("42", &[]);
    let t = Template::parse("subject", "outbox.{header.tenant}").unwrap();
    e.topic = Some("orders.special".into());
    assert!(matches!(
        t.destination(&e).unwrap(),
        Cow::Borrowed("orders.special")
    ));
    e.topic = None;
    assert!(t.destination(&e).is_err());
}

#[test]
fn a_missing_header_names_itself_the_setting_and_the_default_syntax() {
    let e = event("42", &[("other", "x")]);
    let t = Template::parse("subject", "outbox.{header.tenant}").unwrap();
    let missing = t.render(&e).unwrap_err();
    assert_eq!(missing.header(), "tenant");
    let why = missing.to_string();
    for needle in [
        "\"tenant\"",
        "subject = outbox.{header.tenant}",
        "{header.tenant:-DEFAULT}",
    ] {
        assert!(why.contains(needle), "{why:?} should mention {needle:?}");
    }
}

#[test]
fn a_default_stands_in_for_a_missing_or_empty_header() {
    let t = "t.{header.tenant:-shared}";
    assert_eq!(render(t, &event("1", &[])).unwrap(), "t.shared");
    assert_eq!(
        render(t, &event("1", &[("tenant", "")])).unwrap(),
        "t.shared"
    );
    assert_eq!(
        render(t, &event("1", &[("tenant", "acme")])).unwrap(),
        "t.acme"
    );
    // An empty default is allowed; a header name may hold dots and colons.
    assert_eq!(render("t{header.x:-}", &event("1", &[])).unwrap(), "t");
    assert_eq!(
        render("{header.a.b:c}", &event("1", &[("a.b:c", "v")])).unwrap(),
        "v"
    );
    // Without a default, an empty header renders empty (the publisher's own
    // naming rules judge the result).
    assert_eq!(
        render("t.{header.tenant}", &event("1", &[("tenant", "")])).unwrap(),
        "t."
    );
}

#[test]
fn doubled_braces_are_literal_braces() {
    let e = event("42", &[]);
    assert_eq!(
        render("{{x}}-{aggregate_id}-}}{{", &e).unwrap(),
        "{x}-42-}{"
    );
    let t = Template::parse("stream", "{{{aggregate_id}}}").unwrap();
    assert_eq!(t.render(&e).unwrap(), "{42}");
    assert_eq!(t.sample("x"), "{x}");
    assert_eq!(t.as_str(), "{{{aggregate_id}}}");
}

#[test]
fn unknown_and_unbalanced_placeholders_are_refused_by_name() {
    for (template, needle) in [
        ("x.{aggregate}", "unknown placeholder {aggregate}"),
        ("x.{topic}", "unknown placeholder {topic}"),
        ("x.{header.}", "unknown placeholder {header.}"),
        ("x.{header.:-d}", "unknown placeholder {header.:-d}"),
        ("x.{}", "unknown placeholder {}"),
        ("x.{Event_Type}", "unknown placeholder {Event_Type}"),
        ("x.{event_type", "a { without its }"),
        ("x.{a{event_type}", "a { without its }"),
        ("x.event_type}", "a } without its {"),
    ] {
        let e = Template::parse("topic_template", template).unwrap_err();
        let why = e.to_string();
        assert!(why.contains(needle), "{template}: {why:?}");
        assert!(
            why.contains("{aggregate_type}, {event_type}, {aggregate_id}, {header.NAME} and {header.NAME:-DEFAULT}"),
            "{why}"
        );
        assert!(!why.contains("{aggregate_id}, {topic}"), "{why}");
        assert_eq!(e.field(), "topic_template");
    }
    let e = Template::parse("topic_template", "x.{tenant}").unwrap_err();
    assert_eq!(e.placeholder(), Some("tenant"));
}

#[test]
fn urls_also_take_the_topic_or_the_event_type() {
    let t = Template::parse_url("url", "http://h/{topic}").unwrap();
    let mut e = event("42", &[]);
    assert_eq!(t.render(&e).unwrap(), "http://h/order.created");
    e.topic = Some("orders".into());
    assert_eq!(t.render(&e).unwrap(), "http://h/orders");
    assert_eq!(t.prefix(), "http://h/");
    let why = Template::parse_url("url", "http://h/{x}")
        .unwrap_err()
        .to_string();
    assert!(why.contains("{aggregate_id}, {topic}, "), "{why}");
}

#[test]
fn sample_fills_every_placeholder() {
    let t = Template::parse("subject", "a.{event_type}.{header.t:-d}.{aggregate_id}").unwrap();
    assert_eq!(t.sample("x"), "a.x.x.x");
    assert!(!t.is_literal());
}
