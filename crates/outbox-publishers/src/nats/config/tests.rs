//! Unit tests of the NATS settings: URLs, secrets, every field's check.

use super::*;
use crate::broker::settings::assert_refused;

#[test]
fn defaults_are_valid() {
    NatsConfig::default().validate().unwrap();
}

#[test]
fn from_url_reads_servers_and_credentials() {
    let c = NatsConfig::from_url("nats://a:1,b:2").unwrap();
    assert_eq!(c.servers, vec!["a:1", "b:2"]);
    assert_eq!((c.user, c.password, c.token), (None, None, None));
    let c = NatsConfig::from_url("nats://localhost").unwrap();
    assert_eq!(c.servers, vec!["localhost:4222"]);
    let c = NatsConfig::from_url("nats://app:p%40ss@h:4222").unwrap();
    assert_eq!(c.user.as_deref(), Some("app"));
    assert_eq!(c.password.as_deref(), Some("p@ss"));
    let c = NatsConfig::from_url("nats://s3cr3t@h:4222").unwrap();
    assert_eq!(c.token.as_deref(), Some("s3cr3t"));
    assert_eq!(c.servers, vec!["h:4222"]);
}

#[test]
fn bad_urls_name_the_url_and_hide_the_password() {
    for url in [
        "http://h:4222",
        "nats://",
        "nats://h:0",
        "nats://h:99999",
        "nats://h:4222/x",
        "nats://u:hunter2@h:notaport",
        "nats://h 1:4222",
        "nats://:4222",
    ] {
        let e = NatsConfig::from_url(url).unwrap_err();
        let text = e.to_string();
        assert!(
            matches!(e.field(), Some("url" | "servers")),
            "{url}: {text}"
        );
        assert!(!text.contains("hunter2"), "{text}");
        assert!(text.contains("HOST:PORT"), "{text}");
    }
}

#[test]
fn secrets_never_show() {
    let c = NatsConfig {
        user: Some("app".into()),
        password: Some("hunter2".into()),
        ..NatsConfig::default()
    };
    assert!(!format!("{c:?} {c}").contains("hunter2"), "{c:?}");
    let c = NatsConfig {
        token: Some("tok-hunter2".into()),
        ..NatsConfig::default()
    };
    assert!(!format!("{c:?} {c}").contains("hunter2"), "{c:?}");
    let c = NatsConfig::from_url("nats://u:hunter2@h:4222").unwrap();
    assert!(!format!("{c:?} {c}").contains("hunter2"), "{c:?}");
}

#[test]
fn errors_name_field_value_and_fix() {
    let c = NatsConfig {
        subject: "outbox.{aggregate}".into(),
        ..NatsConfig::default()
    };
    assert_refused(
        c.validate(),
        &["subject", "unknown placeholder {aggregate}"],
    );
    for subject in [
        "outbox..{event_type}",
        "outbox.*",
        "outbox.>",
        "out box",
        "",
    ] {
        let c = NatsConfig {
            subject: subject.into(),
            ..NatsConfig::default()
        };
        let e = c.validate().unwrap_err();
        assert_eq!(e.field(), Some("subject"), "{subject}: {e}");
    }
    let c = NatsConfig {
        ack_timeout_ms: 1,
        ..NatsConfig::default()
    };
    assert_refused(c.validate(), &["ack_timeout_ms = 1"]);
    let c = NatsConfig {
        user: Some("app".into()),
        ..NatsConfig::default()
    };
    assert_eq!(c.validate().unwrap_err().field(), Some("password"));
    let c = NatsConfig {
        user: Some("app".into()),
        password: Some("hunter2".into()),
        token: Some("t".into()),
        ..NatsConfig::default()
    };
    let e = c.validate().unwrap_err().to_string();
    assert!(
        e.contains("one way to log in") && !e.contains("hunter2"),
        "{e}"
    );
    let c = NatsConfig {
        tls_cert_file: Some("/etc/nats/client.pem".into()),
        ..NatsConfig::default()
    };
    assert_eq!(c.validate().unwrap_err().field(), Some("tls_key_file"));
    let c = NatsConfig {
        servers: vec![],
        ..NatsConfig::default()
    };
    assert_eq!(c.validate().unwrap_err().field(), Some("servers"));
}

#[test]
fn unknown_fields_are_refused() {
    let e = serde_json::from_str::<NatsConfig>(r#"{"subjct": "x"}"#).unwrap_err();
    assert!(e.to_string().contains("subjct"), "{e}");
    let c: NatsConfig = serde_json::from_str(r#"{"no_stream": "reject"}"#).unwrap();
    assert_eq!(c.no_stream, NoStream::Reject);
    assert!(serde_json::from_str::<NatsConfig>(r#"{"no_stream": "drop"}"#).is_err());
}

#[test]
fn subjects_are_checked_like_the_server_does() {
    assert!(check_subject("outbox.order.order.created").is_ok());
    assert!(check_subject("a-b_c.1").is_ok());
    for bad in ["", ".a", "a.", "a..b", "a b", "a\tb", "a.*", "a.>", "a.*.b"] {
        assert!(check_subject(bad).is_err(), "{bad:?}");
    }
    assert!(
        check_subject("a*b").is_ok(),
        "only whole-token wildcards are special"
    );
}
