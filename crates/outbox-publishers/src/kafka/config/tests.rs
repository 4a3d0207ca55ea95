//! Unit tests of the parent module.

use super::*;
use crate::broker::settings::assert_refused;

#[test]
fn defaults_are_valid() {
    KafkaConfig::default().validate().unwrap();
}

#[test]
fn from_url_reads_brokers_and_refuses_the_rest() {
    let c = KafkaConfig::from_url("kafka://a:1,b:2").unwrap();
    assert_eq!(c.brokers, vec!["a:1", "b:2"]);
    let e = KafkaConfig::from_url("http://a:1").unwrap_err();
    assert_eq!(e.field(), Some("url"));
    let e = KafkaConfig::from_url("kafka://a").unwrap_err();
    assert!(
        e.to_string().contains("brokers") && e.to_string().contains("HOST:PORT"),
        "{e}"
    );
    let e = KafkaConfig::from_url("kafka://u:hunter2@a:1").unwrap_err();
    assert!(!e.to_string().contains("hunter2"), "{e}");
    assert!(KafkaConfig::from_url("kafka://a:1/x").is_err());
}

#[test]
fn errors_name_field_value_and_fix() {
    let c = KafkaConfig {
        max_in_flight: 6,
        ..KafkaConfig::default()
    };
    assert_refused(c.validate(), &["max_in_flight", "6", "1 to 5"]);

    let c = KafkaConfig {
        topic_template: "outbox {aggregate_type}".into(),
        ..KafkaConfig::default()
    };
    assert_refused(c.validate(), &["topic_template", "' '"]);

    let c = KafkaConfig {
        topic_template: "x.{aggregate}".into(),
        ..KafkaConfig::default()
    };
    assert_refused(
        c.validate(),
        &["topic_template", "unknown placeholder {aggregate}"],
    );

    let mut c = KafkaConfig::default();
    c.properties.insert("acks".into(), "1".into());
    assert_refused(c.validate(), &["properties.acks", "all"]);
}

#[test]
fn unknown_fields_are_refused() {
    let e = serde_json::from_str::<KafkaConfig>(r#"{"broker": ["a:1"]}"#).unwrap_err();
    assert!(e.to_string().contains("broker"), "{e}");
}

#[test]
fn secrets_never_show() {
    let mut c = KafkaConfig::default();
    c.properties
        .insert("sasl.password".into(), "hunter2".into());
    c.properties.insert("sasl.username".into(), "alice".into());
    let shown = format!("{c:?}");
    assert!(
        !shown.contains("hunter2") && shown.contains("alice"),
        "{shown}"
    );
    c.properties.insert("acks".into(), "hunter2".into());
    c.properties.remove("sasl.password");
    c.properties
        .insert("ssl.key.password".into(), "hunter2".into());
    c.properties.remove("acks");
    c.properties
        .insert("enable.idempotence".into(), "false".into());
    let e = c.validate().unwrap_err().to_string();
    assert!(!e.contains("hunter2"), "{e}");
}

#[test]
fn a_property_of_the_wrong_type_is_named_but_a_secret_is_not_shown() {
    for (value, kind) in [
        ("12345", "an integer"),
        ("123.45", "a number"),
        ("true", "a boolean"),
        ("[\"hunter2\", 12345]", "an array"),
        ("{ \"v\": \"hunter2\" }", "a table"),
    ] {
        for name in ["sasl.password", "ssl.key.password", "client_secret"] {
            let json = format!(r#"{{"properties": {{"{name}": {value}}}}}"#);
            let e = serde_json::from_str::<KafkaConfig>(&json)
                .unwrap_err()
                .to_string();
            assert!(e.contains(name) && e.contains(kind), "{e}");
            assert!(e.contains("must be a string"), "{e}");
            assert!(
                !e.contains("hunter2") && !e.contains("12345") && !e.contains("123.45"),
                "{e}"
            );
        }
    }
    let e = serde_json::from_str::<KafkaConfig>(r#"{"properties": {"linger.ms": 5}}"#)
        .unwrap_err()
        .to_string();
    assert!(e.contains("linger.ms") && e.contains("(5)"), "{e}");
    let c: KafkaConfig = serde_json::from_str(r#"{"properties": {"linger.ms": "5"}}"#).unwrap();
    assert_eq!(c.properties["linger.ms"], "5");
}

#[test]
fn topic_names_are_checked() {
    assert!(topic_problem("outbox.event.order").is_none());
    assert!(topic_problem("a b").is_some());
    assert!(topic_problem(&"x".repeat(250)).is_some());
    assert!(topic_problem("..").is_some());
}

#[test]
fn event_id_header_takes_debeziums_name_and_refuses_a_taken_or_empty_one() {
    assert_eq!(KafkaConfig::default().event_id_header, "outbox-event-id");
    let c: KafkaConfig = serde_json::from_str(r#"{"event_id_header": "id"}"#).unwrap();
    c.validate().unwrap();
    for (name, fix) in [
        ("", "without surrounding spaces"),
        (" id", "without surrounding spaces"),
        ("outbox-aggregate-id", "another identity field"),
        ("outbox-event-type", "another identity field"),
    ] {
        let c = KafkaConfig {
            event_id_header: name.into(),
            ..KafkaConfig::default()
        };
        assert_refused(c.validate(), &["event_id_header", fix]);
    }
}
