//! Hostile and careless input to every command, as tables of input ×
//! command: config files that are not files, publisher specs that
//! `config check` and `relay` must judge alike, database URLs of other
//! databases, schema names PostgreSQL would refuse, empty and huge values,
//! `bench` numbers out of range, and a `file:` publisher pointed at a FIFO.
//!
//! Every case must be refused promptly (well within its time limit) with a
//! non-zero exit, no panic and one error line that names the setting and
//! says what to do, without echoing a long value back whole. A new command
//! or setting is covered by adding it to the tables.
//!
//! Longer than most files on purpose: the tables are the point, and one file
//! per concern keeps a new command or input form a one-line addition.

mod common;

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use outbox_testkit::postgres::migrated_test_db;

/// Where a command that got past validation would try to connect: nothing
/// listens on port 1, so no case depends on a server.
const NOWHERE: &str = "postgres://outbox:hunter2@127.0.0.1:1/app";

/// Time limit of a case that must be refused at start-up.
const PROMPTLY: Duration = Duration::from_secs(20);

/// Address space of each child: a case that reads or allocates without
/// bound fails instead of taking the machine's memory with it.
const MEMORY_LIMIT: u64 = 2 << 30;

/// The commands that read the configuration, as a user would type them.
const COMMANDS: &[&[&str]] = &[
    &["config", "check"],
    &["relay"],
    &["status"],
    &["migrate"],
    &["dead-letters", "list"],
    &["cleanup", "--dry-run"],
];

/// One finished (or stopped) run of the program.
struct Run {
    what: String,
    code: Option<i32>,
    stderr: String,
    took: Duration,
}

/// A child with its output being collected.
struct Running {
    what: String,
    child: Child,
    started: Instant,
    stdout: JoinHandle<Vec<u8>>,
    stderr: JoinHandle<Vec<u8>>,
}

fn collect(mut pipe: impl Read + Send + 'static) -> JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut out = Vec::new();
        let _ = pipe.read_to_end(&mut out);
        out
    })
}

/// `outbox ARGS` with `env`, the database pointing nowhere unless `env`
/// says otherwise.
fn command(args: &[&str], env: &[(&str, &str)]) -> Command {
    let mut cmd = common::bin();
    cmd.env_remove("OUTBOX_CONFIG")
        .env("DATABASE_URL", NOWHERE)
        .envs(env.iter().copied())
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // SAFETY: setrlimit is async-signal-safe and touches only the child.
    unsafe {
        cmd.pre_exec(|| {
            let limit = libc::rlimit {
                rlim_cur: MEMORY_LIMIT,
                rlim_max: MEMORY_LIMIT,
            };
            libc::setrlimit(libc::RLIMIT_AS, &limit);
            Ok(())
        });
    }
    cmd
}

fn start(args: &[&str], env: &[(&str, &str)]) -> Running {
    let mut child = command(args, env).spawn().expect("start outbox");
    Running {
        what: describe(args, env),
        stdout: collect(child.stdout.take().unwrap()),
        stderr: collect(child.stderr.take().unwrap()),
        child,
        started: Instant::now(),
    }
}

/// The case as a shell line, long values shortened.
fn describe(args: &[&str], env: &[(&str, &str)]) -> String {
    let short = |s: &str| {
        if s.len() > 60 {
            format!("{}…({} bytes)", &s[..40], s.len())
        } else if s.is_empty() {
            "''".to_owned()
        } else {
            s.to_owned()
        }
    };
    let mut parts: Vec<String> = env
        .iter()
        .map(|(k, v)| format!("{k}={}", short(v)))
        .collect();
    parts.push("outbox".to_owned());
    parts.extend(args.iter().map(|a| short(a)));
    parts.join(" ")
}

fn sigterm(child: &Child) {
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("kill");
    assert!(status.success(), "kill -TERM failed");
}

impl Running {
    /// Waits up to `limit`; a child still running then gets SIGTERM and
    /// five seconds, then SIGKILL, and the case fails saying which it
    /// needed.
    fn finish(mut self, limit: Duration) -> Run {
        let waited = |child: &mut Child, until: Instant| loop {
            if let Some(status) = child.try_wait().expect("wait") {
                return Some(status);
            }
            if Instant::now() >= until {
                return None;
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        let status = match waited(&mut self.child, self.started + limit) {
            Some(status) => status,
            None => {
                sigterm(&self.child);
                let after_term = waited(&mut self.child, Instant::now() + Duration::from_secs(5));
                if after_term.is_none() {
                    let _ = self.child.kill();
                    let _ = self.child.wait();
                }
                let stderr = String::from_utf8_lossy(&self.stderr.join().unwrap()).into_owned();
                panic!(
                    "{}: still running after {limit:?}; {} (stderr: {:?})",
                    self.what,
                    if after_term.is_some() {
                        "it stopped on SIGTERM"
                    } else {
                        "it ignored SIGTERM too and was killed"
                    },
                    shorten(&stderr)
                );
            }
        };
        let took = self.started.elapsed();
        let _ = self.stdout.join();
        Run {
            what: self.what,
            code: status.code(),
            stderr: String::from_utf8_lossy(&self.stderr.join().unwrap()).into_owned(),
            took,
        }
    }
}

fn run(args: &[&str], env: &[(&str, &str)]) -> Run {
    start(args, env).finish(PROMPTLY)
}

fn shorten(text: &str) -> String {
    if text.len() > 2_000 {
        let head: String = text.chars().take(2_000).collect();
        format!("{head}… ({} bytes)", text.len())
    } else {
        text.to_owned()
    }
}

/// The one error line of a refused run. Argument errors from the parser
/// are followed by its hint to try `--help`; nothing else may follow.
fn error_line(run: &Run) -> &str {
    let lines: Vec<&str> = run
        .stderr
        .lines()
        .filter(|l| !l.trim().is_empty())
        .collect();
    let shown = shorten(&run.stderr);
    assert!(
        !lines.is_empty() && lines[0].starts_with("error: "),
        "{}: no error line: {shown:?}",
        run.what
    );
    assert!(
        lines[1..]
            .iter()
            .all(|l| *l == "For more information, try '--help'."),
        "{}: the error is not one line: {shown:?}",
        run.what
    );
    lines[0]
}

/// Asserts `run` was refused cleanly and its error mentions every needle.
fn refused(run: &Run, needles: &[&str]) {
    let shown = shorten(&run.stderr);
    assert!(
        !run.stderr.contains("panicked") && run.code != Some(101),
        "{}: panicked: {shown:?}",
        run.what
    );
    assert!(
        matches!(run.code, Some(c) if c != 0),
        "{}: should fail, exited {:?}: {shown:?}",
        run.what,
        run.code
    );
    assert!(
        run.stderr.len() < 1_000,
        "{}: a long value was echoed: {shown:?}",
        run.what
    );
    assert!(
        !run.stderr.contains("hunter2"),
        "{}: the password was shown: {shown:?}",
        run.what
    );
    let line = error_line(run);
    for needle in needles {
        assert!(
            line.contains(needle),
            "{}: {line:?} should mention {needle:?}",
            run.what
        );
    }
}

/// Makes a FIFO `name` in `dir`; its path.
fn mkfifo(dir: &Path, name: &str) -> PathBuf {
    let path = dir.join(name);
    let status = Command::new("mkfifo").arg(&path).status().expect("mkfifo");
    assert!(status.success(), "mkfifo {}", path.display());
    path
}

fn write(dir: &Path, name: &str, text: impl AsRef<[u8]>) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

/// Runs `outbox --config FILE COMMAND`, FILE being `name` in `dir`: the
/// text `key` (a TOML key, after its table's header if any) set to a
/// string of a megabyte of `letter`.
fn huge_value_in(dir: &Path, name: &str, key: &str, letter: &str, command: &str) -> Run {
    let config = write(
        dir,
        name,
        format!("{key} = \"{}\"\n", letter.repeat(1_000_000)),
    );
    run(&["--config", config.to_str().unwrap(), command], &[])
}

/// A valid config file of `keys` keys: the webhook's extra headers (any
/// names; unlike Kafka properties, which librdkafka checks by name).
fn many_keys(keys: usize) -> String {
    let mut text = String::from(
        "[publisher]\nspec = \"https://hooks.example.com/in\"\n[publisher.http]\nsecret = \"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\"\n[publisher.http.headers]\n",
    );
    for i in 0..keys {
        text.push_str(&format!("p{i}=\"v\"\n"));
    }
    text
}

#[test]
fn config_files_that_are_not_files_are_refused_by_every_command() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = mkfifo(dir.path(), "config.fifo");
    let big = write(dir.path(), "big.toml", "#".repeat(2 << 20));
    let keys = write(dir.path(), "keys.toml", many_keys(500_000));
    let binary = write(dir.path(), "binary.toml", b"schema = \"a\"\n\xff\xfe\n");
    let missing = dir.path().join("missing.toml");
    let files: Vec<(String, Vec<&str>)> = vec![
        ("/dev/zero".into(), vec!["/dev/zero", "character device"]),
        (
            "/dev/urandom".into(),
            vec!["/dev/urandom", "character device"],
        ),
        (fifo.display().to_string(), vec!["FIFO"]),
        (dir.path().display().to_string(), vec!["directory"]),
        (
            missing.display().to_string(),
            vec!["missing.toml", "No such file"],
        ),
        (big.display().to_string(), vec!["2097152 bytes", "1 MiB"]),
        (keys.display().to_string(), vec!["keys.toml", "1 MiB"]),
        (binary.display().to_string(), vec!["binary.toml:2", "UTF-8"]),
        (String::new(), vec!["--config"]),
    ];
    for (file, needles) in &files {
        for cmd in COMMANDS {
            let mut args = vec!["--config", file.as_str()];
            args.extend_from_slice(cmd);
            refused(&run(&args, &[]), needles);
        }
        if !file.is_empty() {
            // (An empty positional PATH is refused by the argument parser.)
            refused(&run(&["config", "check", file], &[]), needles);
        }
        if !file.is_empty() {
            refused(&run(&["relay"], &[("OUTBOX_CONFIG", file)]), needles);
        }
    }
}

/// Password files are read as config files are: a device, a FIFO (which
/// blocked the open for ever, deaf to SIGTERM) or a directory is refused
/// before anything is read, a file over 4 KiB (`/dev/zero` was read until
/// the kernel killed the program) refused after reading at most the
/// limit, each at once in one line naming the flag to fix.
#[test]
fn password_files_that_are_not_small_files_are_refused_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = mkfifo(dir.path(), "password.fifo");
    let big = write(dir.path(), "big.txt", "p".repeat(5000));
    let binary = write(dir.path(), "binary.txt", b"pass\xff\xfe\n");
    let missing = dir.path().join("missing.txt");
    let files: Vec<(String, Vec<&str>)> = vec![
        ("/dev/zero".into(), vec!["/dev/zero", "character device"]),
        (
            "/dev/urandom".into(),
            vec!["/dev/urandom", "character device"],
        ),
        (fifo.display().to_string(), vec!["FIFO"]),
        (dir.path().display().to_string(), vec!["directory"]),
        (big.display().to_string(), vec!["5000 bytes", "4 KiB"]),
        (binary.display().to_string(), vec!["binary.txt", "UTF-8"]),
        (
            missing.display().to_string(),
            vec!["missing.txt", "No such file"],
        ),
    ];
    for (file, needles) in &files {
        let relay = [
            "relay",
            "--publisher",
            "stdout",
            "--http-addr",
            "127.0.0.1:0",
            "--console",
            "--console-password-file",
            file,
        ];
        let console = [
            "console",
            "--listen",
            "127.0.0.1:0",
            "--password-file",
            file,
        ];
        for (args, flag) in [
            (&relay[..], "--console-password-file"),
            (&console[..], "--password-file"),
        ] {
            let r = run(args, &[]);
            let mut needles = needles.clone();
            needles.push("password file");
            if !file.contains("missing") {
                needles.push(flag);
            }
            refused(&r, &needles);
        }
    }
}

#[test]
fn a_config_file_of_many_keys_is_read_in_linear_time() {
    let dir = tempfile::tempdir().unwrap();
    // As many keys as fit under the size limit: reading the line of each
    // key from the start of the file took minutes for this many.
    let text = many_keys(90_000);
    assert!(text.len() < 1 << 20, "{} bytes", text.len());
    let path = write(dir.path(), "keys.toml", text);
    let run =
        start(&["config", "check", path.to_str().unwrap()], &[]).finish(Duration::from_secs(120));
    assert_eq!(run.code, Some(0), "{}", shorten(&run.stderr));
    eprintln!("config check of 90000 keys took {:?}", run.took);
}

/// One way of giving a setting: the name an error must use for it, the
/// arguments before and after the command, and the environment.
struct Way<'a> {
    name: &'a str,
    before: Vec<&'a str>,
    after: Vec<&'a str>,
    env: Vec<(&'a str, &'a str)>,
}

/// `config check` and `relay` on the same bad publisher: both refuse it,
/// with the same message, whether it came from a flag, the environment or
/// the config file.
#[test]
fn config_check_and_relay_judge_every_publisher_alike() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = mkfifo(dir.path(), "events.fifo");
    let fifo_spec = format!("file:{}", fifo.display());
    let dir_spec = format!("file:{}", dir.path().display());
    let missing_spec = format!("file:{}/missing/events.jsonl", dir.path().display());
    let long_spec = format!("kafka://{}:99999", "h".repeat(100_000));
    let cases: Vec<(&str, Vec<&str>)> = vec![
        ("kafka://", vec!["HOST:PORT"]),
        ("kafka://:::", vec!["HOST:PORT"]),
        (
            "kafka://127.0.0.1:99999",
            vec!["127.0.0.1:99999", "1 to 65535"],
        ),
        ("kafka://k:9092/topic", vec!["broker list"]),
        ("amqp://u:hunter2@h:99999/v", vec!["amqp://"]),
        ("", vec!["empty", "stdout, file:PATH"]),
        ("kafkaa://x", vec!["unknown", "stdout, file:PATH"]),
        ("null", vec!["unknown", "stdout, file:PATH"]),
        ("file:", vec!["needs a path"]),
        (&fifo_spec, vec!["FIFO", "regular file"]),
        (&dir_spec, vec!["directory", "regular file"]),
        ("file:/dev/null", vec!["character device", "regular file"]),
        (&missing_spec, vec!["missing"]),
        (&long_spec, vec!["100014 bytes"]),
    ];
    for (spec, needles) in &cases {
        let config = write(
            dir.path(),
            "publisher.toml",
            format!("publisher = {spec:?}\n"),
        );
        let config = config.to_str().unwrap();
        let mut ways = vec![
            Way {
                name: "--publisher",
                before: vec![],
                after: vec!["--publisher", spec],
                env: vec![],
            },
            Way {
                name: "publisher (",
                before: vec!["--config", config],
                after: vec![],
                env: vec![],
            },
        ];
        if !spec.is_empty() {
            // An empty variable counts as unset.
            ways.push(Way {
                name: "OUTBOX_PUBLISHER",
                before: vec![],
                after: vec![],
                env: vec![("OUTBOX_PUBLISHER", spec)],
            });
        }
        for Way {
            name,
            before,
            after,
            env,
        } in &ways
        {
            let verdicts: Vec<Run> = [&["config", "check"][..], &["relay"][..]]
                .iter()
                .map(|cmd| {
                    let mut all = before.clone();
                    all.extend_from_slice(cmd);
                    all.extend_from_slice(after);
                    run(&all, env)
                })
                .collect();
            for v in &verdicts {
                let mut wanted = needles.clone();
                wanted.push(name);
                refused(v, &wanted);
            }
            assert_eq!(
                error_line(&verdicts[0]),
                error_line(&verdicts[1]),
                "config check and relay disagree on {spec:?}"
            );
        }
    }
    // And a good one passes both the same way (relay then fails only to
    // connect).
    let check = run(
        &["config", "check", "--publisher", "kafka://127.0.0.1:9092"],
        &[],
    );
    assert_eq!(check.code, Some(0), "{}", check.stderr);
}

/// What `relay` refuses at start, `config check` refuses too, in the same
/// words: addresses it could not listen on, and Kafka properties librdkafka
/// does not know (asked without connecting).
#[test]
fn config_check_and_relay_judge_listen_addresses_and_kafka_properties_alike() {
    let dir = tempfile::tempdir().unwrap();
    let kafka = write(
        dir.path(),
        "kafka.toml",
        "[publisher]\nspec = \"kafka://127.0.0.1:1\"\n[publisher.kafka.properties]\n\"no.such.prop\" = \"1\"\n",
    );
    let kafka = kafka.to_str().unwrap();
    let cases: &[(&[&str], &[&str], &[&str])] = &[
        (
            &[],
            &["--http-addr", "http://127.0.0.1:80"],
            &["http.addr", "--http-addr", "HOST:PORT"],
        ),
        (&[], &["--http-addr", "[::1"], &["http.addr", "HOST:PORT"]),
        (
            &[],
            &["--http-addr", "garbage.invalid:80"],
            &["http.addr", "garbage.invalid"],
        ),
        (&["--config", kafka], &[], &["no.such.prop", "kafka.toml"]),
    ];
    for (before, after, needles) in cases {
        let verdicts: Vec<Run> = [&["config", "check"][..], &["relay"][..]]
            .iter()
            .map(|cmd| {
                let mut all = before.to_vec();
                all.extend_from_slice(cmd);
                all.extend_from_slice(after);
                run(&all, &[])
            })
            .collect();
        for v in &verdicts {
            refused(v, needles);
        }
        assert_eq!(
            error_line(&verdicts[0]),
            error_line(&verdicts[1]),
            "config check and relay disagree"
        );
    }
}

/// A database URL or an age that cannot work is refused with what to do,
/// before any connection or query, rather than leaving the user guessing.
#[test]
fn database_urls_and_ages_that_cannot_work_say_what_to_do() {
    for password in ["a/b", "a#b", "a?b"] {
        let url = format!("postgres://postgres:{password}@127.0.0.1:1/c1");
        let r = run(&["status", "--database-url", &url], &[]);
        refused(&r, &["--database-url", "percent-encode"]);
    }
    let url = "postgres://app@127.0.0.1:1/app?sslmode=bogus";
    let r = run(&["status", "--database-url", url], &[]);
    refused(&r, &["sslmode", "bogus", "verify-full"]);
    let line = error_line(&r);
    assert_eq!(
        line.matches("error with configuration").count(),
        0,
        "{line}"
    );
    for args in [
        &["cleanup", "--older-than", "100000000d"][..],
        &[
            "dead-letters",
            "retry",
            "--all",
            "--older-than",
            "100000000d",
        ],
        &["dead-letters", "list", "--older-than", "100000000d"],
    ] {
        let r = run(args, &[]);
        refused(&r, &["--older-than", "36500d"]);
        assert!(!r.stderr.contains("cannot connect"), "{}", r.stderr);
    }
}

#[test]
fn database_urls_of_other_databases_are_refused_by_every_command() {
    let urls: &[(&str, &[&str])] = &[
        (
            "http://db.internal/app",
            &["http:// is not PostgreSQL", "postgres://"],
        ),
        (
            "mysql://app:hunter2@db/app",
            &["mysql:// is not PostgreSQL", "postgres://"],
        ),
        (
            "host=db password=hunter2",
            &["connection strings", "postgres://"],
        ),
        ("not-a-url", &["not a URL", "postgres://"]),
        ("", &["empty", "postgres://"]),
        ("postgres://app:hunter2@db:99999/app", &["postgres://"]),
    ];
    for (url, needles) in urls {
        for cmd in COMMANDS {
            let mut args: Vec<&str> = cmd.to_vec();
            args.extend(["--database-url", url]);
            let mut wanted = needles.to_vec();
            wanted.extend(["database URL", "--database-url"]);
            refused(&run(&args, &[]), &wanted);
        }
        if !url.is_empty() {
            let r = run(&["status"], &[("DATABASE_URL", url)]);
            refused(&r, &["database URL", "DATABASE_URL"]);
        }
    }
}

#[test]
fn schema_names_postgresql_would_refuse_are_refused_first() {
    let huge = "x".repeat(100_000);
    let names: &[(&str, &[&str])] = &[
        ("select", &["\"select\"", "keyword", "use another name"]),
        ("user", &["\"user\"", "keyword", "use another name"]),
        ("table", &["keyword"]),
        ("pg_catalog", &["pg_", "pg_dump", "use another name"]),
        ("pg_toast", &["pg_", "pg_dump"]),
        ("information_schema", &["system schema", "pg_dump"]),
        ("", &["empty", "public"]),
        ("Bad-Name", &["Bad-Name", "lowercase"]),
        (&huge, &["100000 bytes", "1-63"]),
    ];
    for (name, needles) in names {
        for cmd in COMMANDS {
            let mut args = vec!["--schema", name];
            args.extend_from_slice(cmd);
            let mut wanted = needles.to_vec();
            wanted.extend(["invalid schema", "--schema"]);
            refused(&run(&args, &[]), &wanted);
        }
    }
    let r = run(&["migrate"], &[("OUTBOX_SCHEMA", "select")]);
    refused(&r, &["OUTBOX_SCHEMA", "keyword"]);
    // A megabyte of name in a config file is cut too.
    let dir = tempfile::tempdir().unwrap();
    let r = huge_value_in(dir.path(), "schema.toml", "schema", "y", "status");
    refused(&r, &["schema.toml:1", "1000000 bytes"]);
}

#[test]
fn empty_and_huge_values_are_errors_naming_the_setting() {
    let huge = "i".repeat(100_000);
    let cases: &[(&[&str], &[&str])] = &[
        (
            &["--instance-id", ""],
            &["relay.instance_id", "--instance-id", "empty"],
        ),
        (&["--instance-id", "   "], &["relay.instance_id", "empty"]),
        (
            &["--instance-id", &huge],
            &["relay.instance_id", "100000 bytes", "1 to 200"],
        ),
        (
            &["--instance-id", "x\ny"],
            &["relay.instance_id", "--instance-id", "control character"],
        ),
        (
            &["--instance-id", "x\u{1b}[31mred"],
            &["relay.instance_id", "--instance-id", "control character"],
        ),
        (&["--http-addr", ""], &["http.addr", "HOST:PORT"]),
        (&["--http-addr", &huge], &["http.addr", "100000 bytes"]),
        (&["--log-level", ""], &["log.level", "--log-level"]),
        (&["--log-level", &huge], &["log.level", "100000 bytes"]),
    ];
    for (flags, needles) in cases {
        for cmd in [&["config", "check"][..], &["relay"][..]] {
            let mut args = cmd.to_vec();
            args.extend_from_slice(flags);
            refused(&run(&args, &[]), needles);
        }
    }
    let r = run(&["relay"], &[("OUTBOX_RELAY_INSTANCE_ID", &huge)]);
    refused(&r, &["OUTBOX_RELAY_INSTANCE_ID", "100000 bytes"]);
    let dir = tempfile::tempdir().unwrap();
    let r = huge_value_in(dir.path(), "id.toml", "[relay]\ninstance_id", "z", "relay");
    refused(&r, &["relay.instance_id", "id.toml:2", "1000000 bytes"]);
    let r = huge_value_in(dir.path(), "type.toml", "[relay]\nbatch_size", "z", "relay");
    refused(&r, &["relay.batch_size", "whole number"]);
}

#[test]
fn bench_and_demo_numbers_have_ranges() {
    // A case a line: the arguments, then what the error must name.
    let cases = "
        bench latency --rate 2147483647 => --rate | 1..=20000
        bench latency --rate 0 => --rate | 1..=20000
        bench latency --seconds 9223372036854775807 => --seconds | 1..=3600
        bench latency --connections 4294967295 => --connections | 1..=500
        bench latency --rate 20000 --seconds 3600 => --rate | --seconds | 72000000 events | 1000000
        bench produce --seconds 9223372036854775807 => --seconds | 1..=3600
        bench produce --producers 4294967295 => --producers | 1..=500
        bench produce --rounds 0 => --rounds | 1..=100
        bench produce --wake-interval-ms 0 => --wake-interval-ms | 1..=60000
        bench drain --events 0 => --events | 1..=10000000
        bench drain --events 18446744073709551615 => --events | 1..=10000000
        bench drain --aggregates 0 => --aggregates
        bench drain --batch-size 0 => --batch-size | 1..=100000
        bench drain --reference-batch=-1 => --reference-batch
        demo --producers 4294967295 => --producers | 1..=64
        demo --orders 0 => --orders";
    for case in cases.lines().map(str::trim).filter(|l| !l.is_empty()) {
        let (args, needles) = case.split_once(" => ").expect("ARGS => NEEDLES");
        let args: Vec<&str> = args.split(' ').collect();
        let needles: Vec<&str> = needles.split(" | ").collect();
        refused(&run(&args, &[]), &needles);
    }
}

/// A FIFO nobody reads would block the relay in `open` before it logged
/// anything, deaf to SIGTERM, so it is refused at once, with or without a
/// reader.
#[test]
fn a_file_publisher_on_a_fifo_is_refused_at_once() {
    use std::os::unix::fs::OpenOptionsExt;

    let dir = tempfile::tempdir().unwrap();
    let fifo = mkfifo(dir.path(), "events.fifo");
    let spec = format!("file:{}", fifo.display());
    let r = start(&["relay", "--publisher", &spec], &[]).finish(Duration::from_secs(10));
    refused(&r, &["FIFO", "--publisher"]);
    let _reader = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(&fifo)
        .unwrap();
    let r = start(&["relay", "--publisher", &spec], &[]).finish(Duration::from_secs(10));
    refused(&r, &["FIFO", "--publisher"]);
}

/// A relay publishing to a file stops on SIGTERM.
#[tokio::test]
async fn a_relay_publishing_to_a_file_stops_on_sigterm() {
    let (db, _pool) = migrated_test_db().await;
    let dir = tempfile::tempdir().unwrap();
    let spec = format!("file:{}", dir.path().join("events.jsonl").display());
    let mut relay = start(
        &["relay", "--publisher", &spec],
        &[("DATABASE_URL", &db.url)],
    );
    // Started once the output file exists (it is opened before connecting).
    let until = Instant::now() + Duration::from_secs(20);
    while !dir.path().join("events.jsonl").exists() && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        relay.child.try_wait().unwrap().is_none(),
        "the relay stopped by itself"
    );
    sigterm(&relay.child);
    relay.started = Instant::now();
    let r = relay.finish(Duration::from_secs(10));
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    assert!(r.took < Duration::from_secs(10), "{:?}", r.took);
}
