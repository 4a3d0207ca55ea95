//! Layering, origins and the completeness of the key list and the docs,
//! and the `[[source]]` entries checked through the same layers (long: one
//! set of helpers serves both).

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::path::Path;

use super::keys::KEYS;
use super::*;

fn file(text: &str) -> Option<file::FileLayer> {
    Some(file::parse(Path::new("/etc/outbox.toml"), text).unwrap())
}

fn env_of(pairs: &[(&str, &str)]) -> env::EnvLayer {
    env::from_vars(
        pairs
            .iter()
            .map(|(k, v)| (OsString::from(k), OsString::from(v))),
    )
    .unwrap()
}

fn flags_of(path: &str, flag: &'static str, value: toml::Value) -> Flags {
    let mut l = Flags::default();
    set_path(&mut l.table, path, value);
    l.flags.insert(path.to_owned(), flag);
    l
}

/// The error of resolving the layers for the relay, as text: for cases
/// that must be refused.
fn refused(file: Option<file::FileLayer>, env: env::EnvLayer, flags: Flags) -> String {
    resolve(file, env, flags, "info").unwrap_err().to_string()
}

/// Asserts that the error text `e` holds every one of `needles`.
fn assert_mentions(e: &str, needles: &[&str]) {
    for needle in needles {
        assert!(e.contains(needle), "{needle:?} missing in {e}");
    }
}

/// [`refused`] with only the environment variables `vars` set.
fn refused_by_env(vars: &[(&str, &str)]) -> String {
    refused(None, env_of(vars), Default::default())
}

#[test]
fn flags_beat_env_beat_file_beat_defaults() {
    let f = file("[relay]\nbatch_size = 10\nmax_attempts = 3\nlease_ms = 2000\n");
    let e = env_of(&[
        ("OUTBOX_RELAY_BATCH_SIZE", "20"),
        ("OUTBOX_RELAY_MAX_ATTEMPTS", "4"),
    ]);
    let fl = flags_of("relay.batch_size", "--batch-size", toml::Value::Integer(30));
    let l = resolve(f, e, fl, "info").unwrap();
    assert_eq!(l.config.relay.batch_size, 30);
    assert_eq!(l.config.relay.max_attempts, 4);
    assert_eq!(l.config.relay.lease_ms, 2000);
    assert_eq!(l.config.relay.poll_max_ms, 500, "default");
    assert_eq!(l.origin("relay.batch_size"), Origin::Flag("--batch-size"));
    assert_eq!(
        l.origin("relay.max_attempts"),
        Origin::Env("OUTBOX_RELAY_MAX_ATTEMPTS".into())
    );
    assert_eq!(
        l.origin("relay.lease_ms").describe(),
        "set at /etc/outbox.toml:4"
    );
    assert_eq!(l.origin("relay.poll_max_ms"), Origin::Default);
    assert_eq!(l.config.log.level.as_deref(), Some("info"), "relay default");
}

#[test]
fn the_standard_opentelemetry_variables_set_tracing_and_ours_win() {
    let standard = [
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318"),
        ("OTEL_SERVICE_NAME", "orders-relay"),
    ];
    let ours = [("OUTBOX_TRACING_OTLP_ENDPOINT", "http://other:4318")];
    let both: Vec<_> = standard.iter().chain(&ours).copied().collect();
    for (vars, endpoint, origin) in [
        (
            &standard[..],
            "http://collector:4318",
            "OTEL_EXPORTER_OTLP_ENDPOINT",
        ),
        (
            &both[..],
            "http://other:4318",
            "OUTBOX_TRACING_OTLP_ENDPOINT",
        ),
    ] {
        let l = resolve(None, env_of(vars), Default::default(), "info").unwrap();
        let t = &l.config.tracing;
        assert_eq!(t.otlp_endpoint.as_deref(), Some(endpoint));
        assert_eq!(t.service_name.as_deref(), Some("orders-relay"));
        assert_eq!(
            l.origin("tracing.otlp_endpoint"),
            Origin::Env(origin.into())
        );
    }
}

#[test]
fn env_publisher_replaces_the_file_spec_but_keeps_its_table() {
    let f = file("[publisher]\nspec = \"kafka://a:1\"\n[publisher.kafka]\nclient_id = \"x\"\n");
    let e = env_of(&[("OUTBOX_PUBLISHER", "kafka://b:2")]);
    let l = resolve(f, e, Default::default(), "warn").unwrap();
    assert_eq!(l.config.publisher.spec, "kafka://b:2");
    assert!(l.config.publisher.tables.contains_key("kafka"));
    assert_eq!(
        l.config.log.level.as_deref(),
        Some("warn"),
        "non-relay default"
    );
}

#[test]
fn range_errors_name_key_value_origin_and_range() {
    let e = refused(
        file("[relay]\nbatch_size = 0\n"),
        Default::default(),
        Default::default(),
    );
    assert_mentions(&e, &["relay.batch_size", "/etc/outbox.toml:2"]);
    assert_mentions(&e, &[" 0 ", "1 to 100000"]);

    let e = refused_by_env(&[("OUTBOX_SHUTDOWN_TIMEOUT_SECS", "0")]);
    assert_mentions(
        &e,
        &["shutdown_timeout_secs = 0", "OUTBOX_SHUTDOWN_TIMEOUT_SECS"],
    );
    assert!(e.contains("1 to 3600"), "{e}");

    let bad = [
        ("http.addr", toml::Value::from("nowhere"), "HOST:PORT"),
        ("log.level", toml::Value::from("loud"), "debug"),
        (
            "tracing.otlp_endpoint",
            toml::Value::from("collector:4318"),
            "base URL",
        ),
        ("schema", toml::Value::from("Bad-Name"), "lowercase"),
        (
            "publisher.spec",
            toml::Value::from("kafkaa://x"),
            "unknown --x",
        ),
        (
            "database_url",
            toml::Value::from("postgres://u:pw@h:99999/d"),
            "invalid database URL",
        ),
    ];
    for (key, value, needle) in bad {
        let e = refused(None, Default::default(), flags_of(key, "--x", value));
        assert!(e.contains(needle) && e.contains("--x"), "{key}: {e}");
        assert!(!e.contains(":pw@"), "{e}");
    }
}

#[test]
fn broker_tables_must_match_the_publisher() {
    let e = resolve(
        file("publisher = \"stdout\"\n[relay]\n"),
        Default::default(),
        Default::default(),
        "info",
    );
    assert!(e.is_ok());
    let f = file("[publisher]\nspec = \"stdout\"\n[publisher.amqp]\nexchange = \"x\"\n");
    let e = refused(f, Default::default(), Default::default());
    assert_mentions(&e, &["[publisher.amqp]", "stdout"]);
}

/// Every scalar key of the schema, found by serialising a config with every
/// optional value set.
fn schema_keys() -> BTreeSet<String> {
    let mut c = Config {
        database_url: Some("postgres://h/d".into()),
        ..Config::default()
    };
    c.http.addr = Some("127.0.0.1:1".into());
    c.log.level = Some("info".into());
    c.tracing.otlp_endpoint = Some("http://127.0.0.1:4318".into());
    c.tracing.service_name = Some("outbox".into());
    c.relay.instance_id = Some("i".into());
    c.cleaner.inbox_retention_secs = Some(1);
    let table = toml::Table::try_from(&c).unwrap();
    let mut out = BTreeSet::new();
    fn walk(t: &toml::Table, prefix: &str, out: &mut BTreeSet<String>) {
        for (k, v) in t {
            let path = if prefix.is_empty() {
                k.clone()
            } else {
                format!("{prefix}.{k}")
            };
            match v {
                toml::Value::Table(inner) => walk(inner, &path, out),
                _ => {
                    out.insert(path);
                }
            }
        }
    }
    walk(&table, "", &mut out);
    out
}

#[test]
fn the_key_list_covers_the_whole_schema() {
    let listed: BTreeSet<String> = KEYS.iter().map(|k| k.path.to_owned()).collect();
    assert_eq!(listed, schema_keys());
}

#[test]
fn every_key_and_variable_is_documented() {
    let doc = include_str!("../../../../docs/configuration.md");
    for key in KEYS {
        let name = key.path.rsplit('.').next().unwrap();
        assert!(
            doc.contains(&format!("`{name}`")),
            "{} is not in docs/configuration.md",
            key.path
        );
        for var in key.env {
            assert!(doc.contains(var), "{var} is not in docs/configuration.md");
        }
        if let Some(flag) = key.flag {
            assert!(doc.contains(flag), "{flag} is not in docs/configuration.md");
        }
    }
}

#[test]
fn the_rendered_config_is_valid_toml_and_hides_passwords() {
    let f = file("database_url = \"postgres://app:hunter2@db/x\"\n[relay]\nbatch_size = 7\n");
    let l = resolve(f, Default::default(), Default::default(), "info").unwrap();
    let text = render(&l);
    assert!(!text.contains("hunter2"), "{text}");
    assert!(text.contains("postgres://app:***@db/x"), "{text}");
    assert!(
        text.contains("batch_size = 7") && text.contains("/etc/outbox.toml:3"),
        "{text}"
    );
    let back: Config = toml::from_str(&text).unwrap();
    assert_eq!(back.relay.batch_size, 7);
    assert!(!redacted_json(&l).contains("hunter2"));
}

#[test]
fn the_message_format_is_checked_naming_key_value_and_choices() {
    let l = resolve(None, Default::default(), Default::default(), "info").unwrap();
    assert_eq!(l.config.publisher.format, "plain");
    let envelope = l.config.envelope().unwrap();
    assert!(envelope.is_plain());

    let fl = flags_of(
        "publisher.format",
        "--format",
        toml::Value::String("cloudevents".into()),
    );
    let e = refused(None, Default::default(), fl);
    assert_eq!(
        e,
        "invalid publisher.format = \"cloudevents\" (set by --format): use plain, cloudevents-binary or cloudevents-structured"
    );
    let f = file("[publisher]\nspec = \"stdout\"\nformat = \"xml\"\n");
    let e = refused(f, Default::default(), Default::default());
    assert_mentions(&e, &["publisher.format = \"xml\"", "/etc/outbox.toml:3"]);
    let e = refused_by_env(&[("OUTBOX_PUBLISHER_CLOUDEVENTS_SOURCE", "not a uri")]);
    assert_mentions(
        &e,
        &[
            "publisher.cloudevents_source = \"not a uri\"",
            "OUTBOX_PUBLISHER_CLOUDEVENTS_SOURCE",
        ],
    );
}

#[test]
fn cloudevents_source_fills_in_the_schema() {
    let f = file("schema = \"shop\"\n[publisher]\nformat = \"cloudevents-structured\"\n");
    let l = resolve(f, Default::default(), Default::default(), "info").unwrap();
    let envelope = l.config.envelope().unwrap();
    assert_eq!(
        envelope.format(),
        outbox_publishers::Format::CloudEventsStructured
    );
    assert_eq!(envelope.source(), "/outbox/shop");
    let e = env_of(&[
        ("OUTBOX_PUBLISHER_FORMAT", "cloudevents-binary"),
        (
            "OUTBOX_PUBLISHER_CLOUDEVENTS_SOURCE",
            "https://shop.example/{schema}/x",
        ),
    ]);
    let l = resolve(None, e, Default::default(), "info").unwrap();
    let envelope = l.config.envelope().unwrap();
    assert_eq!(envelope.source(), "https://shop.example/public/x");
}

/// A file of two `[[source]]` entries (`orders` on its own database with
/// overrides, `tenants` a pattern on the top-level one) followed by `more`.
fn two_sources(more: &str) -> Option<file::FileLayer> {
    file(&format!(
        "database_url = \"postgres://app:hunter2@db/app\"\n\
         [relay]\nbatch_size = 50\n\
         [[source]]\nname = \"orders\"\ndatabase_url = \"postgres://o:pw@db/orders\"\n\
         schema = \"public\"\nbatch_size = 7\nmax_attempts = 3\npublisher = \"file:/tmp/orders\"\n\
         [[source]]\nname = \"tenants\"\nschemas = \"tenant_*\"\n{more}"
    ))
}

#[test]
fn sources_resolve_with_the_defaults_and_overrides_they_name() {
    let l = resolve(
        two_sources(""),
        Default::default(),
        Default::default(),
        "info",
    )
    .unwrap();
    let s = l.config.sources().unwrap();
    assert_eq!(s.len(), 2);
    assert_eq!(s[0].name, "orders");
    assert_eq!(s[0].database_url, "postgres://o:pw@db/orders");
    assert_eq!(
        s[0].schemas,
        SchemaSelector::One(outbox::Schema::new("public").unwrap())
    );
    assert_eq!((s[0].relay.batch_size, s[0].relay.max_attempts), (7, 3));
    assert_eq!(s[0].publisher.spec, "file:/tmp/orders");
    assert_eq!(s[1].database_url, "postgres://app:hunter2@db/app");
    assert_eq!(s[1].schemas, SchemaSelector::Pattern("tenant_*".into()));
    assert_eq!((s[1].relay.batch_size, s[1].relay.max_attempts), (50, 10));
    assert_eq!(s[1].publisher.spec, "stdout");
    assert_eq!(l.config.sources_settings, SourcesSettings::default());
    assert_eq!(
        l.origin("source[2].schemas").describe(),
        "set at /etc/outbox.toml:13"
    );

    let none = resolve(None, Default::default(), Default::default(), "info").unwrap();
    assert!(none.config.sources().unwrap().is_empty());
}

#[test]
fn bad_source_entries_are_refused_naming_the_entry_key_value_and_fix() {
    let cases: &[(&str, &[&str])] = &[
        (
            "schema = \"x\"\n",
            &[
                "source[2].schema",
                "schema = \"x\"",
                "schemas = \"tenant_*\"",
                ":14",
            ],
        ),
        (
            "[[source]]\nname = \"orders\"\nschema = \"x\"\n",
            &["source[3].name", "\"orders\"", "source[1]", ":15"],
        ),
        (
            "[[source]]\nname = \"a/b\"\nschema = \"x\"\n",
            &["source[3].name", "a/b", "letters, digits"],
        ),
        (
            "[[source]]\nname = \"c\"\n",
            &["source[3].schema", "schemas = \"tenant_*\"", ":14"],
        ),
        (
            "[[source]]\nname = \"c\"\nschema = \"Bad\"\n",
            &["source[3].schema", "Bad", "lowercase"],
        ),
        (
            "[[source]]\nname = \"c\"\nschemas = \"t%\"\n",
            &["source[3].schemas", "t%", "wildcards"],
        ),
        (
            "[[source]]\nname = \"c\"\nschema = \"x\"\nmax_attempts = 0\n",
            &["source[3].max_attempts", "1 to 1000", ":17"],
        ),
        (
            "[[source]]\nname = \"c\"\nschema = \"x\"\ndatabase_url = \"mysql://h/d\"\n",
            &["source[3].database_url", "postgres://", ":17"],
        ),
        (
            "[[source]]\nname = \"c\"\nschema = \"x\"\npublisher = \"nope://x\"\n",
            &["source[3].publisher", "nope://", "kafka://"],
        ),
        (
            "[[source]]\nname = \"c\"\nschema = \"x\"\n[source.publisher]\nformat = \"xml\"\n",
            &[
                "source[3].publisher.format = \"xml\"",
                ":18",
                "cloudevents-binary",
            ],
        ),
    ];
    for (more, needles) in cases {
        let e = refused(two_sources(more), Default::default(), Default::default());
        assert_mentions(&e, needles);
        assert!(!e.contains("hunter2"), "{e}");
    }
}

#[test]
fn a_source_without_any_database_url_is_refused() {
    let f = file("[[source]]\nname = \"a\"\nschema = \"public\"\n");
    let e = refused(f, Default::default(), Default::default());
    assert_mentions(
        &e,
        &[
            "source[1].database_url",
            "\"a\"",
            ":1",
            "top-level database_url",
        ],
    );
    // The top-level URL from the environment serves as the default.
    let f = file("[[source]]\nname = \"a\"\nschema = \"public\"\n");
    let l = resolve(
        f,
        env_of(&[("DATABASE_URL", "postgres://h/d")]),
        Default::default(),
        "info",
    )
    .unwrap();
    assert_eq!(
        l.config.sources().unwrap()[0].database_url,
        "postgres://h/d"
    );
}

#[test]
fn a_top_level_schema_beside_sources_is_refused_naming_both() {
    let f = file("schema = \"app\"\n[[source]]\nname = \"a\"\nschema = \"public\"\ndatabase_url = \"postgres://h/d\"\n");
    let e = refused(f, Default::default(), Default::default());
    assert_mentions(
        &e,
        &[
            "schema = \"app\"",
            "/etc/outbox.toml:1",
            "[[source]]",
            "/etc/outbox.toml:2",
        ],
    );
    let e = refused(
        two_sources(""),
        env_of(&[("OUTBOX_SCHEMA", "app")]),
        Default::default(),
    );
    assert_mentions(&e, &["schema = \"app\"", "OUTBOX_SCHEMA", "[[source]]"]);
}

#[test]
fn unknown_keys_in_a_source_list_the_allowed_ones() {
    let e = file::parse(
        Path::new("/etc/outbox.toml"),
        "[[source]]\nname = \"a\"\nschema = \"x\"\n[[source]]\nname = \"b\"\nschmea = \"x\"\n",
    )
    .unwrap_err()
    .to_string();
    assert_mentions(
        &e,
        &[
            ":6",
            "source[2]",
            "schmea",
            "schemas",
            "max_attempts",
            "publisher",
        ],
    );
}

#[test]
fn sources_settings_have_ranges_and_an_environment() {
    let f = file("[sources]\nready = \"any\"\nrescan_secs = 5\npool_size = 3\ncheck_ms = 50\n");
    let l = resolve(f, Default::default(), Default::default(), "info").unwrap();
    let s = &l.config.sources_settings;
    assert_eq!(
        (s.ready, s.rescan_secs, s.pool_size, s.check_ms),
        (Readiness::Any, 5, 3, 50)
    );
    for (key, bad) in [
        ("rescan_secs", "0"),
        ("rescan_secs", "3601"),
        ("pool_size", "1"),
        ("pool_size", "1001"),
        ("check_ms", "49"),
        ("check_ms", "600001"),
    ] {
        let var = format!("OUTBOX_SOURCES_{}", key.to_uppercase());
        let e = refused_by_env(&[(&var, bad)]);
        assert_mentions(
            &e,
            &[&format!("sources.{key} = {bad}"), &var, "out of range"],
        );
    }
    let e = file::parse(
        Path::new("/etc/outbox.toml"),
        "[sources]\nready = \"some\"\n",
    )
    .unwrap_err()
    .to_string();
    assert_mentions(&e, &["sources.ready", "some", "`all`", "`any`"]);
}

#[test]
fn the_rendered_sources_hide_passwords_and_read_back() {
    let l = resolve(
        two_sources(""),
        Default::default(),
        Default::default(),
        "info",
    )
    .unwrap();
    let text = render(&l);
    assert!(
        !text.contains("hunter2") && !text.contains(":pw@"),
        "{text}"
    );
    assert_mentions(
        &text,
        &[
            "[[source]]",
            "postgres://o:***@db/orders",
            "# set at /etc/outbox.toml:13",
            "[sources]",
        ],
    );
    assert!(!redacted_json(&l).contains(":pw@"));
    let back: Config = toml::from_str(&text).unwrap();
    assert_eq!(back.source.len(), 2);
    assert_eq!(back.source[0].batch_size, Some(7));
    assert_eq!(
        back.source[0].publisher.as_ref().map(|p| p.spec.as_str()),
        Some("file:/tmp/orders")
    );
    assert_eq!(back.source[1].schemas.as_deref(), Some("tenant_*"));
}
