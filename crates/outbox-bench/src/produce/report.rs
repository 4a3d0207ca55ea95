//! What `bench produce` prints: transactions per second and WAL bytes per
//! transaction of every variant at each producer count, as ratios to the
//! business row alone (o), to the seed-like table (s) and to the logical
//! message (m).

use serde_json::{json, Value};

use super::super::stats::median;
use super::variant::{Variant, VARIANTS};

/// One timed run of one variant.
#[derive(Debug, Clone, Copy)]
pub struct Run {
    /// Transactions per second.
    pub tps: f64,
    /// WAL bytes written per transaction, the server's whole WAL over the
    /// run (a running relay's writes included: they are part of the cost).
    pub wal_per_tx: f64,
}

/// The figures at one producer count.
pub struct AtCount {
    pub producers: u32,
    /// Every run, by variant (index in [`VARIANTS`]).
    pub runs: [Vec<Run>; VARIANTS.len()],
    /// Events a relay variant's relay had left undelivered when its
    /// producers stopped, at most, by variant.
    pub backlog_max: [i64; VARIANTS.len()],
}

pub fn index(v: Variant) -> usize {
    VARIANTS.iter().position(|&x| x == v).expect("a variant")
}

impl AtCount {
    pub fn new(producers: u32) -> AtCount {
        AtCount {
            producers,
            runs: Default::default(),
            backlog_max: [0; VARIANTS.len()],
        }
    }

    /// Median transactions per second of `v`, if it ran.
    fn tps(&self, v: Variant) -> Option<f64> {
        let runs = &self.runs[index(v)];
        (!runs.is_empty()).then(|| median(runs.iter().map(|r| r.tps).collect()))
    }

    /// Median WAL bytes per transaction of `v`, if it ran.
    fn wal(&self, v: Variant) -> Option<f64> {
        let runs = &self.runs[index(v)];
        (!runs.is_empty()).then(|| median(runs.iter().map(|r| r.wal_per_tx).collect()))
    }
}

fn ratio(x: Option<f64>, to: Option<f64>) -> Option<f64> {
    Some(x? / to?)
}

fn cell(x: Option<f64>, width: usize, decimals: usize) -> String {
    match x {
        Some(x) => format!("{x:>width$.decimals$}"),
        None => format!("{:>width$}", "-"),
    }
}

/// Prints the tables and returns the figures for the JSON line.
pub fn print(counts: &[AtCount], ran: &[Variant]) -> Vec<Value> {
    for v in ran {
        println!("  ({}) {}", v.letter(), v.describe());
    }
    let mut header = format!("  {:>9}", "producers");
    for v in ran {
        header += &format!(
            " {:>8} {:>5}",
            format!("({}) tx/s", v.letter()),
            format!("{}/o", v.letter())
        );
    }
    header += &format!(" {:>5} {:>5} {:>5}", "d/s", "d/m", "d/b");
    let wal = ran.contains(&Variant::Emit);
    if wal {
        header += &format!(" {:>5} {:>5} {:>5} {:>5}", "w/s", "w/m", "x/s", "x/m");
    }
    println!("{header}");
    let mut rows = Vec::new();
    for at in counts {
        let o = at.tps(Variant::Orders);
        let b = at.tps(Variant::Plain);
        let mut line = format!("  {:>9}", at.producers);
        let mut row = serde_json::Map::new();
        row.insert("producers".into(), json!(at.producers));
        for &v in ran {
            let tps = at.tps(v);
            line += &format!(" {} {}", cell(tps, 8, 0), cell(ratio(tps, o), 5, 2));
            let (key, letter) = (v.key(), v.letter());
            row.insert(format!("{key}_tps"), json!(tps));
            row.insert(format!("{key}_wal_bytes_per_tx"), json!(at.wal(v)));
            row.insert(format!("{letter}_over_o"), json!(ratio(tps, o)));
            if v != Variant::Plain {
                row.insert(format!("{letter}_over_b"), json!(ratio(tps, b)));
            }
            if v.relay() {
                row.insert(
                    format!("{key}_backlog_max"),
                    json!(at.backlog_max[index(v)]),
                );
            }
        }
        let d = at.tps(Variant::IdleRelay);
        let (d_s, d_m, d_b) = (
            ratio(d, at.tps(Variant::Seed)),
            ratio(d, at.tps(Variant::Message)),
            ratio(d, b),
        );
        line += &format!(
            " {} {} {}",
            cell(d_s, 5, 2),
            cell(d_m, 5, 2),
            cell(d_b, 5, 2)
        );
        if wal {
            let (s, m) = (at.tps(Variant::Seed), at.tps(Variant::Message));
            for (name, x) in [
                ("w", at.tps(Variant::Emit)),
                ("x", at.tps(Variant::EmitRelay)),
            ] {
                let (over_s, over_m) = (ratio(x, s), ratio(x, m));
                line += &format!(" {} {}", cell(over_s, 5, 2), cell(over_m, 5, 2));
                row.insert(format!("{name}_over_s"), json!(over_s));
                row.insert(format!("{name}_over_m"), json!(over_m));
            }
        }
        println!("{line}");
        row.insert("d_over_s".into(), json!(d_s));
        row.insert("d_over_m".into(), json!(d_m));
        let e = at.tps(Variant::PlainRelay);
        row.insert("d_over_e".into(), json!(ratio(d, e)));
        if e.is_none() {
            row.insert("plain_relay_tps".into(), Value::Null);
        }
        rows.push(Value::Object(row));
    }
    println!("  WAL bytes per transaction (medians; the whole server's WAL over each run):");
    let mut header = format!("  {:>9}", "producers");
    for v in ran {
        header += &format!(" {:>7}", format!("({})", v.letter()));
    }
    println!("{header}");
    for at in counts {
        let mut line = format!("  {:>9}", at.producers);
        for &v in ran {
            line += &format!(" {}", cell(at.wal(v), 7, 0));
        }
        println!("{line}");
    }
    rows
}
