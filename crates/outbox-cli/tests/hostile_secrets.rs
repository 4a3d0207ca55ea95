//! Secrets never show, and every error stays on one line: each form a
//! password can take (URL userinfo holding any character, query
//! parameters, libpq key=value strings, broker URLs, Kafka properties of
//! any type, environment variables, broken config files) × each output of
//! the program (`status`, `migrate` and `relay` errors with their debug
//! logs in text and JSON, `config check`).
//!
//! Every case hides a marker of its own (`S3cr3t-007`, or a long number for
//! an integer value) on both sides of its hostile characters, so that a
//! password cut short, split over lines or half-hidden is caught as well
//! as one printed whole. Nothing listens where the cases point: every
//! command that connects fails at once with "connection refused".
//!
//! Longer than most files on purpose: the table of secret forms is the
//! point, and every output path must run over all of it.

mod common;

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use outbox_testkit::postgres::free_port;

/// How one case hands its secret to the program.
#[derive(Clone)]
struct Case {
    name: String,
    /// Strings that must never appear in the output.
    markers: Vec<String>,
    /// Flags (after the subcommand).
    args: Vec<String>,
    /// Environment variables.
    env: Vec<(String, String)>,
    /// A config file's text.
    file: Option<String>,
    /// Whether the case names the database itself (otherwise a refused one
    /// is added).
    has_db: bool,
    /// Whether `args` are `relay` flags that `status` and `migrate` refuse.
    relay_flags: bool,
}

/// The program's outputs under test.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Surface {
    /// `outbox status` at debug level, text logs.
    Status,
    /// `outbox migrate` at debug level, JSON logs.
    Migrate,
    /// `outbox config check`.
    ConfigCheck,
    /// `outbox relay --drain` at debug level, text logs.
    RelayText,
    /// `outbox relay --drain` at debug level, JSON logs.
    RelayJson,
}

struct Forms {
    cases: Vec<Case>,
    dead: u16,
}

fn marker(n: usize) -> String {
    format!("S3cr3t-{n:03}")
}

/// A TOML string literal holding `s` exactly.
fn toml_str(s: &str) -> String {
    toml::Value::String(s.to_owned()).to_string()
}

/// How a case hands its secret over: flags, environment variables and a
/// config file's text.
type Handed = (Vec<String>, Vec<(String, String)>, Option<String>);

/// `value` handed over `via`: a flag (`--…`) with it, a config file's
/// `file_key = value` (`file`), or else the environment variable `via`.
fn handed(via: &str, file_key: &str, value: String) -> Handed {
    match via {
        "file" => (
            vec![],
            vec![],
            Some(format!("{file_key} = {}\n", toml_str(&value))),
        ),
        flag if flag.starts_with("--") => (vec![flag.into(), value], vec![], None),
        var => (vec![], vec![(var.into(), value)], None),
    }
}

/// Every form, numbered from 1.
fn forms() -> Forms {
    let dead = free_port();
    let host = format!("127.0.0.1:{dead}");
    let mut cases = Vec::new();
    let mut add = |name: &str,
                   markers: Vec<String>,
                   (args, env, file): Handed,
                   has_db: bool,
                   relay_flags: bool| {
        cases.push(Case {
            name: name.to_owned(),
            markers,
            args,
            env,
            file,
            has_db,
            relay_flags,
        })
    };
    let mut n = 0;
    let mut next = || {
        n += 1;
        (n, marker(n))
    };

    // Database URLs and connection strings, each handed over four ways.
    type Form = fn(&str, &str) -> String;
    let db_forms: &[(&str, Form)] = &[
        ("userinfo", |m, h| format!("postgres://app:{m}{m}@{h}/db")),
        ("userinfo with a space", |m, h| {
            format!("postgres://app:{m} {m}@{h}/db")
        }),
        ("userinfo with a tab", |m, h| {
            format!("postgres://app:{m}\t{m}@{h}/db")
        }),
        ("userinfo with a newline", |m, h| {
            format!("postgres://app:{m}\n{m}@{h}/db")
        }),
        ("userinfo with CR LF", |m, h| {
            format!("postgres://app:{m}\r\n{m}@{h}/db")
        }),
        ("userinfo with a double quote", |m, h| {
            format!("postgres://app:{m}\"{m}@{h}/db")
        }),
        ("userinfo with a single quote", |m, h| {
            format!("postgres://app:{m}'{m}@{h}/db")
        }),
        ("userinfo with @", |m, h| {
            format!("postgres://app:{m}@{m}@{h}/db")
        }),
        ("userinfo with : and /", |m, h| {
            format!("postgres://app:{m}:/{m}@{h}/db")
        }),
        ("userinfo percent-encoded", |m, h| {
            format!("postgres://app:{m}%40%20%2F%0A{m}@{h}/db")
        }),
        ("userinfo with ? and #", |m, h| {
            format!("postgres://app:{m}?#{m}@{h}/db")
        }),
        ("userinfo, no user", |m, h| {
            format!("postgres://:{m}{m}@{h}/db")
        }),
        ("?password=", |m, h| {
            format!("postgres://app@{h}/db?password={m}{m}")
        }),
        ("&sslpassword=", |m, h| {
            format!("postgres://app@{h}/db?sslmode=disable&sslpassword={m}{m}")
        }),
        ("?password= with a space", |m, h| {
            format!("postgres://app@{h}/db?password={m} {m}")
        }),
        ("postgresql:// with userinfo and ?password=", |m, h| {
            format!("postgresql://app:{m}@{h}/db?application_name=x&password={m}")
        }),
        ("key=value unquoted", |m, h| {
            let (host, port) = h.split_once(':').unwrap();
            format!("host={host} port={port} password={m}{m} dbname=db")
        }),
        ("key=value quoted, escaped quote", |m, h| {
            let (host, port) = h.split_once(':').unwrap();
            format!("host={host} port={port} password='{m} \\' {m}' dbname=db")
        }),
        ("key=value with spaces around =", |m, h| {
            let (host, port) = h.split_once(':').unwrap();
            format!("host = {host} port = {port} password = {m}{m}")
        }),
        ("http:// URL", |m, h| format!("http://app:{m} {m}@{h}/db")),
        ("mysql:// URL", |m, h| format!("mysql://app:{m}@{m}@{h}/db")),
        ("a very long password", |m, h| {
            format!("postgres://app:{m}{}{m}@{h}/db", "x".repeat(2_000))
        }),
    ];
    for (form, url) in db_forms {
        for via in [
            "--database-url",
            "DATABASE_URL",
            "OUTBOX_DATABASE_URL",
            "file",
        ] {
            let (_, m) = next();
            let url = url(&m, &host);
            let name = format!("database {form} via {via}");
            add(
                &name,
                vec![m],
                handed(via, "database_url", url),
                true,
                false,
            );
        }
    }

    // Publisher URLs, each handed over three ways.
    let publisher_forms: &[(&str, Form)] = &[
        ("amqp:// userinfo", |m, h| {
            format!("amqp://guest:{m}{m}@{h}/%2f")
        }),
        ("amqps:// userinfo with a space", |m, h| {
            format!("amqps://guest:{m} {m}@{h}/vhost")
        }),
        ("amqp:// userinfo with a newline", |m, h| {
            format!("amqp://guest:{m}\n{m}@{h}/%2f")
        }),
        ("amqp:// userinfo with @ and a quote", |m, h| {
            format!("amqp://guest:{m}@\"{m}@{h}/%2f")
        }),
        ("amqp:// ?password=", |m, h| {
            format!("amqp://guest@{h}/%2f?heartbeat=5&password={m}{m}")
        }),
        ("amqp:// with a bad port", |m, _| {
            format!("amqp://guest:{m}{m}@127.0.0.1:notaport/%2f")
        }),
        ("kafka:// with credentials", |m, h| {
            format!("kafka://user:{m}{m}@{h}")
        }),
        ("unknown scheme with credentials", |m, h| {
            format!("nats://user:{m} {m}@{h}")
        }),
    ];
    for (form, url) in publisher_forms {
        for via in ["--publisher", "OUTBOX_PUBLISHER", "file"] {
            let (_, m) = next();
            let url = url(&m, &host);
            let name = format!("publisher {form} via {via}");
            let relay_flags = via == "--publisher";
            add(
                &name,
                vec![m],
                handed(via, "publisher", url),
                false,
                relay_flags,
            );
        }
    }

    // Config files.
    let kafka = format!("[publisher]\nspec = \"kafka://{host}\"\n");
    let amqp = format!("[publisher]\nspec = \"amqp://guest@{host}/%2f\"\n");
    type FileForm = fn(&str, &str, &str, &str, &str) -> String;
    let file_forms: &[(&str, FileForm)] = &[
        ("kafka sasl.password as a string", |k, _, _, m, _| {
            format!(
                "{k}[publisher.kafka.properties]\n\"sasl.mechanism\" = \"PLAIN\"\n\"sasl.password\" = \"{m} {m}\"\n"
            )
        }),
        ("kafka sasl.password as an integer", |k, _, _, _, n| {
            format!("{k}[publisher.kafka.properties]\n\"sasl.password\" = {n}\n")
        }),
        ("kafka sasl.password as an array", |k, _, _, m, n| {
            format!("{k}[publisher.kafka.properties]\n\"sasl.password\" = [\"{m}\", {n}]\n")
        }),
        ("kafka sasl.password as a table", |k, _, _, m, n| {
            format!(
                "{k}[publisher.kafka.properties.\"sasl.password\"]\nvalue = \"{m}\"\nnumber = {n}\n"
            )
        }),
        (
            "kafka ssl.key.password and a client secret",
            |k, _, _, m, _| {
                format!(
                "{k}[publisher.kafka.properties]\n\"ssl.key.password\" = \"{m}\"\n\"sasl.oauthbearer.client.secret\" = \"{m}\"\n"
            )
            },
        ),
        (
            "kafka secret next to a reserved property",
            |k, _, _, m, _| {
                format!(
                    "{k}[publisher.kafka.properties]\n\"sasl.password\" = \"{m}\"\nacks = \"1\"\n"
                )
            },
        ),
        ("[publisher.amqp] url with a password", |_, a, h, m, _| {
            format!("{a}[publisher.amqp]\nurl = \"amqp://u:{m}\\t{m}@{h}/%2f\"\n")
        }),
        (
            "[publisher.amqp] unknown key holding URLs",
            |_, a, h, m, _| format!("{a}[publisher.amqp]\nurls = [\"amqp://u:{m}@{h}/%2f\"]\n"),
        ),
        (
            "an unterminated string holding a password",
            |_, _, h, m, _| format!("database_url = \"postgres://app:{m}@{h}/db\n"),
        ),
        ("a misspelt key holding a password", |_, _, h, m, _| {
            format!("databse_url = \"postgres://app:{m}@{h}/db\"\n")
        }),
        ("database_url of the wrong type", |_, _, h, m, _| {
            format!("database_url = [\"postgres://app:{m}@{h}/db\"]\n")
        }),
    ];
    for (name, text) in file_forms {
        let (i, m) = next();
        let number = format!("{}", 73_317_331_000u64 + i as u64);
        add(
            &format!("config file: {name}"),
            vec![m.clone(), number.clone()],
            (
                vec![],
                vec![],
                Some(text(&kafka, &amqp, &host, &m, &number)),
            ),
            false,
            false,
        );
    }

    // Other variables that happen to hold a password: (variable, what it
    // holds, the value).
    let env_forms: &[(&str, &str, Form)] = &[
        ("OUTBOX_RELAY_BATCH_SIZE", "a URL", |m, h| {
            format!("postgres://app:{m} {m}@{h}/db")
        }),
        ("OUTBOX_LOG_LEVEL", "password=", |m, _| {
            format!("password={m}{m}")
        }),
        ("OUTBOX_SCHEMA", "a URL", |m, h| {
            format!("amqp://u:{m}\n{m}@{h}/%2f")
        }),
        ("OUTBOX_HTTP_ADDR", "userinfo", |m, _| {
            format!("http://u:{m}{m}@h:1")
        }),
    ];
    for (var, what, value) in env_forms {
        let (_, m) = next();
        let handed = handed(var, "", value(&m, &host));
        add(
            &format!("{var} holding {what}"),
            vec![m],
            handed,
            false,
            false,
        );
    }
    Forms { cases, dead }
}

/// What one run printed.
struct Ran {
    success: bool,
    stdout: String,
    stderr: String,
}

/// Runs the program, killing it if it takes over 30 s.
fn run(dir: &Path, id: &str, args: &[String], env: &[(String, String)]) -> Result<Ran, String> {
    let out = dir.join(format!("{id}.out"));
    let err = dir.join(format!("{id}.err"));
    let mut child = common::bin()
        .args(args)
        .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .stdin(Stdio::null())
        .stdout(File::create(&out).unwrap())
        .stderr(File::create(&err).unwrap())
        .spawn()
        .map_err(|e| format!("cannot start outbox: {e}"))?;
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > Duration::from_secs(30) {
            let _ = child.kill();
            let _ = child.wait();
            return Err("still running after 30 s".to_owned());
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let read = |p: &PathBuf| String::from_utf8_lossy(&std::fs::read(p).unwrap()).into_owned();
    Ok(Ran {
        success: status.success(),
        stdout: read(&out),
        stderr: read(&err),
    })
}

/// Whether `line` is a text log line (it starts with an RFC 3339 time).
fn is_text_log(line: &str) -> bool {
    let b = line.as_bytes();
    b.len() > 20 && b[..4].iter().all(u8::is_ascii_digit) && b[4] == b'-' && b[10] == b'T'
}

/// The problems of one run of `case` on `path`, if any.
fn check(case: &Case, path: Surface, ran: &Ran) -> Vec<String> {
    let mut problems = Vec::new();
    let all = format!("{}{}", ran.stdout, ran.stderr);
    for m in &case.markers {
        if all.contains(m.as_str()) {
            problems.push(format!("printed the secret {m:?}"));
        }
    }
    if all.contains("panicked") {
        problems.push("panicked".to_owned());
    }
    let must_fail = path != Surface::ConfigCheck;
    if must_fail && ran.success {
        problems.push("succeeded though nothing listens there".to_owned());
    }
    let errors = ran
        .stderr
        .lines()
        .filter(|l| l.starts_with("error: "))
        .count();
    if !ran.success && errors != 1 {
        problems.push(format!("failed with {errors} `error:` lines"));
    }
    for line in ran.stderr.lines() {
        let known = line.starts_with("error: ")
            || line == "configuration OK"
            || is_text_log(line)
            || (line.starts_with('{') && serde_json::from_str::<serde_json::Value>(line).is_ok());
        if !known {
            problems.push(format!(
                "stderr line {line:?} is neither an error, a log line nor a summary: an error or log line was split"
            ));
        }
    }
    if path == Surface::ConfigCheck && ran.success {
        if let Err(e) = toml::from_str::<toml::Table>(&ran.stdout) {
            problems.push(format!("config check printed invalid TOML: {e}"));
        }
    }
    problems
}

/// Runs every case on `path` (four at a time) and fails listing every
/// case that printed a secret or split an error.
fn every_case_on(path: Surface) {
    let Forms { cases, dead } = forms();
    assert!(cases.len() >= 30, "{} forms", cases.len());
    let dir = tempfile::tempdir().unwrap();
    let refused_db = format!("postgres://app@127.0.0.1:{dead}/db");
    let next = AtomicUsize::new(0);
    let failures = Mutex::new(Vec::new());
    let ran = AtomicUsize::new(0);
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::SeqCst);
                let Some(case) = cases.get(i) else { break };
                if case.relay_flags && matches!(path, Surface::Status | Surface::Migrate) {
                    continue;
                }
                let file = case.file.as_ref().map(|text| {
                    let p = dir.path().join(format!("case-{i}.toml"));
                    std::fs::write(&p, text).unwrap();
                    p.display().to_string()
                });
                let mut args: Vec<String> = match path {
                    Surface::Status => vec!["--log-level".into(), "debug".into(), "status".into()],
                    Surface::Migrate => ["--log-level", "debug", "--log-format", "json", "migrate"]
                        .map(String::from)
                        .to_vec(),
                    Surface::ConfigCheck => vec!["config".into(), "check".into()],
                    Surface::RelayText => ["--log-level", "debug", "relay", "--drain"]
                        .map(String::from)
                        .to_vec(),
                    Surface::RelayJson => [
                        "--log-level",
                        "debug",
                        "--log-format",
                        "json",
                        "relay",
                        "--drain",
                    ]
                    .map(String::from)
                    .to_vec(),
                };
                match (&file, path) {
                    (Some(f), Surface::ConfigCheck) => args.push(f.clone()),
                    (Some(f), _) => args.extend(["--config".into(), f.clone()]),
                    (None, _) => {}
                }
                args.extend(case.args.iter().cloned());
                if !case.has_db {
                    args.extend(["--database-url".into(), refused_db.clone()]);
                }
                ran.fetch_add(1, Ordering::SeqCst);
                let problems = match run(dir.path(), &format!("run-{i}"), &args, &case.env) {
                    Ok(out) => check(case, path, &out)
                        .into_iter()
                        .map(|p| {
                            format!(
                                "{p}\n      stdout: {:?}\n      stderr: {:?}",
                                cut(&out.stdout),
                                cut(&out.stderr)
                            )
                        })
                        .collect(),
                    Err(e) => vec![e],
                };
                for p in problems {
                    failures
                        .lock()
                        .unwrap()
                        .push(format!("case {} ({}): {p}", i + 1, case.name));
                }
            });
        }
    });
    let failures = failures.into_inner().unwrap();
    assert!(
        failures.is_empty(),
        "{path:?}: {} problems in {} runs:\n{}",
        failures.len(),
        ran.load(Ordering::SeqCst),
        failures.join("\n")
    );
}

/// At most 3,000 characters of `s`, for failure reports.
fn cut(s: &str) -> String {
    s.chars().take(3_000).collect()
}

/// One test per output of the program, each over every case.
macro_rules! every_case_on {
    ($($test:ident: $surface:ident,)*) => {$(
        #[test]
        fn $test() {
            every_case_on(Surface::$surface);
        }
    )*};
}

every_case_on! {
    status_errors_and_debug_logs_hide_every_secret: Status,
    migrate_errors_and_json_logs_hide_every_secret: Migrate,
    config_check_hides_every_secret: ConfigCheck,
    relay_errors_and_text_debug_logs_hide_every_secret: RelayText,
    relay_errors_and_json_debug_logs_hide_every_secret: RelayJson,
}

#[test]
fn a_refused_database_is_named_at_once() {
    let dead = free_port();
    let url = format!("postgres://app:{}@127.0.0.1:{dead}/db", marker(0));
    for command in ["status", "migrate", "relay"] {
        let started = Instant::now();
        let out = common::run(&[command, "--database-url", &url], None);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{command}: {err}");
        assert!(
            started.elapsed() < Duration::from_secs(3),
            "{command} took {:?}: {err}",
            started.elapsed()
        );
        assert!(
            err.contains("connection refused")
                && err.contains(&format!("postgres://app:***@127.0.0.1:{dead}/db")),
            "{command}: {err}"
        );
    }
}

#[test]
fn other_databases_are_refused_before_connecting() {
    for (url, scheme) in [
        ("http://app:S3cr3t-http@127.0.0.1:1/db", "http://"),
        ("mysql://app:S3cr3t-mysql@127.0.0.1:1/db", "mysql://"),
    ] {
        let out = common::run(&["status", "--database-url", url], None);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success());
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(
            err.contains(scheme) && err.contains("postgres://") && !err.contains("S3cr3t"),
            "{err}"
        );
        assert!(!err.contains("connect"), "tried to connect: {err}");
    }
    let out = common::run(&["status", "--database-url", ""], None);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("empty"), "{err}");
}
