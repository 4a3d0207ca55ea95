//! Unit tests of the parent module.

use super::*;

/// Each input holds the secret `S3cr3t` (or a variant of it); the
/// output must not, must be one line, and, where given, must be exact.
const URLS: &[(&str, Option<&str>)] = &[
    (
        "postgres://app:S3cr3t@db:5432/app",
        Some("postgres://app:***@db:5432/app"),
    ),
    (
        "postgresql://app:S3cr3t@db/app?sslmode=require",
        Some("postgresql://app:***@db/app?sslmode=require"),
    ),
    (
        "postgres://app:S3 cr3t@db/app",
        Some("postgres://app:***@db/app"),
    ),
    (
        "postgres://app:S3\tcr3t@db/app",
        Some("postgres://app:***@db/app"),
    ),
    (
        "postgres://app:S3\ncr3t@db/app",
        Some("postgres://app:***@db/app"),
    ),
    (
        "postgres://app:S3\"cr'3t@db/app",
        Some("postgres://app:***@db/app"),
    ),
    (
        "postgres://app:S3@cr@3t@db/app",
        Some("postgres://app:***@db/app"),
    ),
    (
        "postgres://app:S3:cr/3t?x#y@db/app",
        Some("postgres://app:***@db/app"),
    ),
    (
        "postgres://app:S3cr3t%40%2F%20@db/app",
        Some("postgres://app:***@db/app"),
    ),
    ("postgres://:S3cr3t@db/app", Some("postgres://:***@db/app")),
    (
        "postgres://app@127.0.0.1:1/db?password=S3cr3t",
        Some("postgres://app@127.0.0.1:1/db?password=***"),
    ),
    (
        "postgres://app@db/x?sslmode=disable&sslpassword=S3cr3t&application_name=a",
        Some("postgres://app@db/x?sslmode=disable&sslpassword=***&application_name=a"),
    ),
    (
        "postgres://db/x?PassWord=S3cr3t",
        Some("postgres://db/x?PassWord=***"),
    ),
    (
        "postgres://db/x?pass%77ord=S3cr3t",
        Some("postgres://db/x?pass%77ord=***"),
    ),
    (
        "postgres://db/x?password=S3 cr3t",
        Some("postgres://db/x?password=***"),
    ),
    (
        "postgres://db/x?password=S3cr@3t",
        Some("postgres://db/x?password=***"),
    ),
    (
        "postgres://db/x?passwd=S3cr3t#frag",
        Some("postgres://db/x?passwd=***"),
    ),
    (
        "amqp://guest:S3cr3t@rabbit:5672/%2f",
        Some("amqp://guest:***@rabbit:5672/%2f"),
    ),
    (
        "amqps://guest:S3 cr3t@rabbit:5671/vhost?heartbeat=10",
        Some("amqps://guest:***@rabbit:5671/vhost?heartbeat=10"),
    ),
    (
        "kafka://u:S3cr3t@k1:9092,k2:9092",
        Some("kafka://u:***@k1:9092,k2:9092"),
    ),
    (
        "redis://:S3cr3t@cache:6379/0",
        Some("redis://:***@cache:6379/0"),
    ),
    ("nats://u:S3cr3t@nats:4222", Some("nats://u:***@nats:4222")),
    (
        "https://u:S3cr3t@h/p?api_key=S3cr3t&token=S3cr3t&page=2",
        Some("https://u:***@h/p?api_key=***&token=***&page=2"),
    ),
    (
        "host=db port=5432 password=S3cr3t dbname=app",
        Some("host=db port=5432 password=*** dbname=app"),
    ),
    (
        "host=db password='S3 cr\\'3t' dbname=app",
        Some("host=db password=*** dbname=app"),
    ),
    (
        "host=db password = 'S3cr3t'",
        Some("host=db password = ***"),
    ),
    (
        "host=db sslpassword=S3cr3t\\ x user=u",
        Some("host=db sslpassword=*** user=u"),
    ),
    ("  postgres://u:S3cr3t@h/d", Some("  postgres://u:***@h/d")),
];

#[test]
fn urls_lose_their_secrets() {
    for (input, expected) in URLS {
        for shown in [redact_url(input), redact_text(input)] {
            assert!(
                !shown.contains("S3") && !shown.contains("cr3t"),
                "{input:?} -> {shown:?}"
            );
            assert!(!shown.contains(['\n', '\r', '\t']), "{shown:?}");
            if let Some(expected) = expected {
                assert_eq!(&shown, expected, "{input:?}");
            }
        }
    }
}

#[test]
fn messages_lose_their_secrets() {
    let cases: &[(&str, &str)] = &[
        (
            "cannot connect to postgres://app:S3cr3t@db:5432/x: connection refused",
            "cannot connect to postgres://app:***@db:5432/x: connection refused",
        ),
        (
            "cannot connect to postgres://app:S3 cr\n3t@db:5432/x: refused",
            "cannot connect to postgres://app:***@db:5432/x: refused",
        ),
        (
            "a amqp://u:S3cr3t@h/v and kafka://h:9092",
            "a amqp://u:***@h/v and kafka://h:9092",
        ),
        (
            "two: postgres://a:S3cr3t@h/x, amqp://b:S3cr3t@r/v",
            "two: postgres://a:***@h/x, amqp://b:***@r/v",
        ),
        (
            "invalid connection string host=db password='S3 cr3t' user=u",
            "invalid connection string host=db password=*** user=u",
        ),
        (
            "config: \"sasl.password\" = \"S3cr3t\" in [publisher.kafka.properties]",
            "config: \"sasl.password\" = *** in [publisher.kafka.properties]",
        ),
        (
            "failed: url postgres://db/x?password=S3cr3t&sslmode=require",
            "failed: url postgres://db/x?password=***",
        ),
        ("api_token=S3cr3t, retrying", "api_token=*** retrying"),
        (
            "invalid level \"password=S3cr3t\\\"x\" (set by X)",
            "invalid level \"password=***\" (set by X)",
        ),
    ];
    for (input, expected) in cases {
        assert_eq!(&redact_text(input), expected, "{input:?}");
    }
}

#[test]
fn harmless_text_is_left_alone() {
    for text in [
        "postgres://app@db:5432/app",
        "postgres://db:5432/app?sslmode=require&application_name=outbox",
        "cannot connect to postgres://db:5432/x: role \"a@b\" does not exist",
        "use stdout, file:PATH, kafka://HOST:PORT[,HOST:PORT…] or amqp://USER:PASS@HOST:PORT/VHOST",
        "expected postgres://USER:PASS@HOST:PORT/DB",
        "invalid relay.batch_size = 0 (set by --batch-size): use 1 to 10000",
        "routing_key_template = {event_type}, a == b, x=",
        "kafka setting properties.sasl.password = <redacted>: cannot be set here",
        "already postgres://u:***@h/x: refused for a@b",
        "",
    ] {
        assert_eq!(redact_text(text), text);
    }
}

#[test]
fn redacting_twice_changes_nothing() {
    for (input, _) in URLS {
        let once = redact_text(input);
        assert_eq!(redact_text(&once), once, "{input:?}");
        let once = redact_url(input);
        assert_eq!(redact_url(&once), once, "{input:?}");
    }
}

#[test]
fn errors_stay_on_one_line_and_long_values_are_cut() {
    assert_eq!(
        redact_text("a\nb\r\tc\u{1b}[31m\u{2028}"),
        "a\\nb\\r\\tc\\u{1b}[31m\\u{2028}"
    );
    let url = format!("postgres://u:{}@h/{}", "S".repeat(300), "d".repeat(300));
    let shown = redact_url(&url);
    assert!(!shown.contains("SS"), "{shown}");
    assert!(shown.ends_with(&format!("…({} bytes)", "postgres://u:***@h/".len() + 300)));
    assert_eq!(
        shown.chars().count(),
        MAX_VALUE_CHARS + "…(319 bytes)".chars().count()
    );
    let text = format!("schema {} is invalid", "x".repeat(10_000_000));
    let shown = redact_text(&text);
    assert_eq!(
        shown,
        format!("schema {}…(10000000 bytes) is invalid", "x".repeat(200))
    );
    let words = "word ".repeat(2_000);
    assert!(redact_text(&words).ends_with("…(10000 bytes)"));
}

/// Redaction stays linear on hostile input: eight times the input takes
/// about eight times as long, not sixty-four (a ratio, fastest of three
/// runs each, so a busy machine does not decide it).
#[test]
fn hostile_input_stays_linear() {
    let forms = |n: usize| {
        vec![
            "a://".repeat(n),
            "x=".repeat(2 * n),
            "password=".repeat(n / 2),
            format!("postgres://u:{}", "@:".repeat(n)),
            "'".repeat(2 * n),
        ]
    };
    let fastest = |n: usize| {
        let texts = forms(n);
        (0..3)
            .map(|_| {
                let start = std::time::Instant::now();
                for text in &texts {
                    let _ = redact_text(text);
                    let _ = redact_url(text);
                }
                start.elapsed().as_secs_f64()
            })
            .fold(f64::INFINITY, f64::min)
    };
    let small = fastest(20_000).max(1e-4);
    let large = fastest(160_000);
    assert!(
        large / small < 32.0,
        "8x the input took {:.1}x as long ({small:.4} s vs {large:.4} s): not linear",
        large / small
    );
}

#[test]
fn secret_keys() {
    for key in [
        "password",
        "sasl.password",
        "ssl.key.password",
        "ssl.keystore.password",
        "sslpassword",
        "passwd",
        "PGPASSWORD",
        "secret",
        "client_secret",
        "sasl.oauthbearer.client.secret",
        "api_key",
        "apiKey",
        "private_key",
        "ssl.key.pem",
        "token",
        "access_token",
        "credentials",
        "pass",
        "pwd",
        "Authorization",
    ] {
        assert!(is_secret_key(key), "{key}");
    }
    for key in [
        "sasl.username",
        "user",
        "key_template",
        "routing_key_template",
        "ssl.key.location",
        "ssl.certificate.pem",
        "linger.ms",
        "database_url",
        "host",
        "sslmode",
        "",
    ] {
        assert!(!is_secret_key(key), "{key}");
    }
}
