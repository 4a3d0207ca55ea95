//! Unit tests of the parent module.

use super::*;

const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

fn ok() -> HttpConfig {
    HttpConfig::new("https://hooks.example.com/outbox", SECRET)
}

#[test]
fn a_url_and_a_secret_are_enough() {
    ok().validate().unwrap();
    HttpConfig::new(
        "http://127.0.0.1:8080/hooks/{topic}?t={aggregate_type}",
        SECRET,
    )
    .validate()
    .unwrap();
}

#[test]
fn errors_name_field_value_and_fix() {
    let e = HttpConfig {
        secret: None,
        ..ok()
    }
    .validate()
    .unwrap_err();
    assert_eq!(e.field(), Some("secret"));
    assert!(
        e.to_string().contains(SECRET_ENV) && e.to_string().contains("missing"),
        "{e}"
    );
    for url in [
        "",
        "ftp://h/x",
        "http://",
        "http://h:99999/x",
        "http://{event_type}.example.com/",
        "http://h/{aggregate}",
        "not a url",
    ] {
        let e = HttpConfig {
            url: url.into(),
            ..ok()
        }
        .validate()
        .unwrap_err();
        assert_eq!(e.field(), Some("url"), "{url:?}: {e}");
    }
    let e = HttpConfig {
        timeout_ms: 5,
        ..ok()
    }
    .validate()
    .unwrap_err();
    assert!(e.to_string().contains("timeout_ms = 5"), "{e}");
    let e = HttpConfig {
        max_concurrency: 0,
        ..ok()
    }
    .validate()
    .unwrap_err();
    assert_eq!(e.field(), Some("max_concurrency"));
    for (name, value) in [
        ("webhook-signature", "v1,x"),
        ("Content-Type", "text/plain"),
        ("outbox-event-id", "x"),
        ("bad name", "x"),
        ("x-ok", "line\nbreak"),
        ("x-ok", " padded"),
    ] {
        let c = HttpConfig {
            headers: [(name.to_owned(), value.to_owned())].into(),
            ..ok()
        };
        let e = c.validate().unwrap_err();
        assert!(e.field().unwrap().starts_with("headers."), "{name}: {e}");
    }
}

#[test]
fn secrets_never_show() {
    let c = HttpConfig {
        url: "https://u:hunter2@hooks.example.com/x?token=tok3n".into(),
        headers: [
            ("authorization".to_owned(), "Bearer s3cr3t".to_owned()),
            ("x-api-key".to_owned(), "k3y".to_owned()),
            ("x-tenant".to_owned(), "acme".to_owned()),
        ]
        .into(),
        ..ok()
    };
    c.validate().unwrap();
    let shown = format!("{c:?} {c}");
    for secret in ["hunter2", "tok3n", "s3cr3t", "k3y", "MfKQ9r8"] {
        assert!(!shown.contains(secret), "{secret} in {shown}");
    }
    assert!(shown.contains("acme"), "{shown}");
    let bad = HttpConfig {
        secret: Some("whsec_hunter2hunter2".into()),
        ..c.clone()
    };
    let e = bad.validate().unwrap_err().to_string();
    assert!(!e.contains("hunter2"), "{e}");
    let bad = HttpConfig {
        url: "https://u:hunter2@h:99999/".into(),
        ..c.clone()
    };
    let e = bad.validate().unwrap_err().to_string();
    assert!(!e.contains("hunter2"), "{e}");
    let bad = HttpConfig {
        headers: [("authorization".to_owned(), "Bearer s3cr3t\n".to_owned())].into(),
        ..c
    };
    let e = bad.validate().unwrap_err().to_string();
    assert!(!e.contains("s3cr3t"), "{e}");
}

#[test]
fn unknown_fields_are_refused() {
    let e = serde_json::from_str::<HttpConfig>(r#"{"timeout": 5}"#).unwrap_err();
    assert!(e.to_string().contains("timeout"), "{e}");
    let c: HttpConfig =
        serde_json::from_str(r#"{"max_concurrency": 4, "headers": {"x-a": "b"}}"#).unwrap();
    assert_eq!(c.max_concurrency, 4);
    assert_eq!(c.headers["x-a"], "b");
}
