//! Unit tests of the parent module.

use super::*;
use crate::broker::settings::assert_refused;

#[test]
fn defaults_are_valid() {
    AmqpConfig::default().validate().unwrap();
}

#[test]
fn passwords_never_show() {
    let c = AmqpConfig::from_url("amqp://app:hunter2@rabbit:5672/prod").unwrap();
    assert!(!format!("{c:?}").contains("hunter2"));
    assert!(!format!("{c}").contains("hunter2"));
    assert!(format!("{c}").contains("app:***@rabbit:5672/prod"), "{c}");
    let e = AmqpConfig::from_url("amqp://app:hunter2@rabbit:notaport/x").unwrap_err();
    assert!(!e.to_string().contains("hunter2"), "{e}");
    assert_eq!(redact_url("amqp://rabbit/x"), "amqp://rabbit/x");
    assert_eq!(redact_url("amqp://u@rabbit/x"), "amqp://u@rabbit/x");
    for url in [
        "amqp://app:hunter 2@rabbit/x",
        "amqps://app:hun@ter2@rabbit/x",
        "amqp://app@rabbit/x?password=hunter2",
    ] {
        let c = AmqpConfig::from_url(url).unwrap();
        assert!(!format!("{c:?} {c}").contains("hunter"), "{c:?}");
    }
}

#[test]
fn errors_name_field_value_and_fix() {
    let e = AmqpConfig::from_url("http://x").unwrap_err();
    assert_eq!(e.field(), Some("url"));
    let e = AmqpConfig::from_url("amqp://h:5672/")
        .unwrap_err()
        .to_string();
    assert!(e.contains("%2f"), "{e}");
    let c = AmqpConfig {
        routing_key_template: "{aggregate}".into(),
        ..AmqpConfig::default()
    };
    assert_refused(
        c.validate(),
        &["routing_key_template", "unknown placeholder {aggregate}"],
    );
    let c = AmqpConfig {
        confirm_timeout_ms: 1,
        ..AmqpConfig::default()
    };
    assert_refused(c.validate(), &["confirm_timeout_ms = 1"]);
}

#[test]
fn unknown_fields_are_refused() {
    let e = serde_json::from_str::<AmqpConfig>(r#"{"exchang": "x"}"#).unwrap_err();
    assert!(e.to_string().contains("exchang"), "{e}");
    let c: AmqpConfig = serde_json::from_str(r#"{"unroutable": "reject"}"#).unwrap();
    assert_eq!(c.unroutable, Unroutable::Reject);
}
