//! Unit tests of the parent module.

use super::*;
use crate::broker::settings::assert_refused;

#[test]
fn defaults_are_valid() {
    RedisConfig::default().validate().unwrap();
    for url in [
        "redis://h",
        "redis://h:6380",
        "redis://h:6380/3",
        "redis://:pw@h:6379",
        "redis://app:pw@h:6379/0",
        "redis://[::1]:6379",
    ] {
        RedisConfig::from_url(url).unwrap_or_else(|e| panic!("{url}: {e}"));
    }
}

#[test]
fn bad_urls_name_the_url_and_hide_the_password() {
    for url in [
        "http://h:6379",
        "redis://",
        "redis://:6379",
        "redis://u:hunter2@h:notaport",
        "redis://u:hunter2@h:99999",
        "redis://u:hunter2@h:6379/x",
        "redis://h:6379?db=1",
        "rediss://u:hunter2@h:6379",
    ] {
        let e = RedisConfig::from_url(url).unwrap_err();
        let text = e.to_string();
        assert_eq!(e.field(), Some("url"), "{url}: {text}");
        assert!(!text.contains("hunter2"), "{text}");
        assert!(text.contains("redis://"), "{text}");
    }
}

#[test]
fn passwords_never_show() {
    let c = RedisConfig::from_url("redis://app:hunter2@h:6379/1").unwrap();
    assert!(!format!("{c:?} {c}").contains("hunter2"), "{c:?}");
    assert!(format!("{c}").contains("app:***@h:6379/1"), "{c}");
}

#[test]
fn errors_name_field_value_and_fix() {
    let c = RedisConfig {
        stream: "outbox:{aggregate}".into(),
        ..RedisConfig::default()
    };
    assert_refused(c.validate(), &["stream", "unknown placeholder {aggregate}"]);
    let c = RedisConfig {
        maxlen: Some(0),
        ..RedisConfig::default()
    };
    assert_eq!(c.validate().unwrap_err().field(), Some("maxlen"));
    let c = RedisConfig {
        wait_replicas: Some(1),
        wait_timeout_ms: 20_000,
        ..RedisConfig::default()
    };
    assert_refused(
        c.validate(),
        &["wait_timeout_ms = 20000", "response_timeout_ms"],
    );
    let c = RedisConfig {
        max_message_bytes: 0,
        ..RedisConfig::default()
    };
    assert_eq!(c.validate().unwrap_err().field(), Some("max_message_bytes"));
}

#[test]
fn unknown_fields_are_refused() {
    let e = serde_json::from_str::<RedisConfig>(r#"{"max_len": 5}"#).unwrap_err();
    assert!(e.to_string().contains("max_len"), "{e}");
    let c: RedisConfig = serde_json::from_str(r#"{"maxlen": 1000, "wait_replicas": 1}"#).unwrap();
    assert_eq!((c.maxlen, c.wait_replicas), (Some(1000), Some(1)));
}
