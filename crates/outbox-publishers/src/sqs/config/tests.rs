//! Unit tests of the parent module.

use super::*;

#[test]
fn queue_specs() {
    for (spec, name, fifo) in [
        ("sqs://orders", "orders", false),
        ("sqs://orders.fifo", "orders.fifo", true),
        ("sqs://a_b-C9", "a_b-C9", false),
        (
            "sqs://https://sqs.us-east-2.amazonaws.com/123456789012/orders.fifo",
            "orders.fifo",
            true,
        ),
        (
            "sqs://http://127.0.0.1:5000/123456789012/jobs",
            "jobs",
            false,
        ),
    ] {
        let c = SqsConfig::from_spec(spec).unwrap_or_else(|e| panic!("{spec}: {e}"));
        assert_eq!((c.queue_name(), c.is_fifo()), (name, fifo), "{spec}");
    }
    let c =
        SqsConfig::from_spec("sqs://https://sqs.us-east-2.amazonaws.com/123456789012/orders.fifo")
            .unwrap();
    assert_eq!(c.common().fallback_region.as_deref(), Some("us-east-2"));
}

#[test]
fn bad_queue_specs_name_the_form() {
    for spec in [
        "sqs://",
        "sqs://.fifo",
        "sqs://orders.events",
        "sqs://orders queue",
        "sqs://https://",
        "sqs://https://host/",
        "sqs://https://host/123/orders/x",
        "sqs://https://host/123/orders?x=1",
        "sqs:orders",
        &format!("sqs://{}", "q".repeat(81)),
    ] {
        let e = SqsConfig::from_spec(spec).unwrap_err().to_string();
        assert!(
            e.contains("sqs://QUEUE_NAME") && e.contains("queue"),
            "{spec}: {e}"
        );
    }
}

#[test]
fn topic_specs() {
    let c = SnsConfig::from_spec("sns://arn:aws:sns:eu-west-1:123456789012:events").unwrap();
    assert!(!c.is_fifo());
    assert_eq!(c.common().fallback_region.as_deref(), Some("eu-west-1"));
    for spec in [
        "sns://",
        "sns://orders",
        "sns://arn:aws:sqs:eu-west-1:123456789012:events",
        "sns://arn:aws:sns:eu-west-1:123456789012:",
        "sns://arn:aws:sns:eu-west-1:123456789012:a:b",
        "sns://arn:aws:sns::123456789012:events",
    ] {
        let e = SnsConfig::from_spec(spec).unwrap_err().to_string();
        assert!(e.contains("sns://TOPIC_ARN"), "{spec}: {e}");
    }
}

#[test]
fn settings_are_checked_and_unknown_ones_refused() {
    let base = SqsConfig::from_spec("sqs://q").unwrap();
    for (c, field) in [
        (
            SqsConfig {
                region: Some("US East".into()),
                ..base.clone()
            },
            "region",
        ),
        (
            SqsConfig {
                endpoint_url: Some("http://u:hunter2@h:1".into()),
                ..base.clone()
            },
            "endpoint_url",
        ),
        (
            SqsConfig {
                max_message_bytes: 2 << 20,
                ..base.clone()
            },
            "max_message_bytes",
        ),
        (
            SqsConfig {
                max_concurrent_calls: 0,
                ..base.clone()
            },
            "max_concurrent_calls",
        ),
        (
            SqsConfig {
                timeout_ms: 0,
                ..base.clone()
            },
            "timeout_ms",
        ),
    ] {
        let e = c.validate().unwrap_err();
        assert_eq!(e.field(), Some(field), "{e}");
        assert!(!e.to_string().contains("hunter2"), "{e}");
    }
    let e = serde_json::from_str::<SqsConfig>(r#"{"max_size": 5}"#).unwrap_err();
    assert!(e.to_string().contains("max_size"), "{e}");
    let e = serde_json::from_str::<SnsConfig>(r#"{"queue": "x"}"#).unwrap_err();
    assert!(e.to_string().contains("queue"), "{e}");
}
