//! The texts of the statements that read the outbox table (the claim, the
//! next retry), made new now and then so PostgreSQL plans them again.
//!
//! A prepared statement keeps the generic plan PostgreSQL chose after its
//! first five executions until the table's statistics change. A relay that
//! starts beside a new, empty outbox plans its claim for a table of a few
//! pages, where reading the whole table is cheapest; in retention mode the
//! table then grows by every event delivered, and until autovacuum first
//! analyzes it (its naptime is a minute) each claim reads all of it
//! (measured: 4.2 s claims 40 s into `bench held-snapshot --keep-processed`
//! at 2,000 events/s, 34,000 events pending). A plan made with today's size
//! of the table is right (its partial indexes are small whatever the
//! statistics say), so the text carries a generation that changes about 1,
//! 3, 7, …, 511 s after start and then every 512 s: a plan is not used once
//! the relay is twice as old as when it was made, and a long-running
//! relay prepares one more statement every few minutes (sqlx closes the
//! least recently used beyond its statement cache).

use std::sync::{Arc, Mutex};
use std::time::Instant;

/// After this many seconds the generation changes at a steady pace.
const STEADY_AFTER_SECS: u64 = 512;

/// The generation of a statement `secs` seconds after the relay started:
/// it changes when the relay's age in seconds plus one reaches 2, 4, …, 512
/// and every multiple of 512 after that.
fn generation(secs: u64) -> u64 {
    let t = secs + 1;
    if t < STEADY_AFTER_SECS {
        u64::from(t.ilog2())
    } else {
        u64::from(STEADY_AFTER_SECS.ilog2()) - 1 + t / STEADY_AFTER_SECS
    }
}

/// A statement whose text names its generation in a trailing comment
/// (`pg_stat_statements` ignores it: the statements count as one).
#[derive(Debug)]
pub struct Replanned {
    text: String,
    born: Instant,
    current: Mutex<(u64, Arc<str>)>,
}

impl Replanned {
    pub fn new(text: String) -> Arc<Self> {
        let first = with_generation(&text, 0);
        Arc::new(Replanned {
            text,
            born: Instant::now(),
            current: Mutex::new((0, first)),
        })
    }

    /// The text to run now.
    pub fn sql(&self) -> Arc<str> {
        let generation = generation(self.born.elapsed().as_secs());
        let mut current = self.current.lock().unwrap_or_else(|e| e.into_inner());
        if current.0 != generation {
            *current = (generation, with_generation(&self.text, generation));
        }
        current.1.clone()
    }
}

fn with_generation(text: &str, generation: u64) -> Arc<str> {
    format!("{text}\n/* plan {generation} */").into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generations_double_in_length_then_keep_a_steady_pace() {
        let changes: Vec<u64> = (1..=3_000)
            .filter(|&s| generation(s) != generation(s - 1))
            .collect();
        assert_eq!(
            changes,
            [1, 3, 7, 15, 31, 63, 127, 255, 511, 1_023, 1_535, 2_047, 2_559]
        );
    }

    #[test]
    fn a_day_prepares_a_few_hundred_statements_at_most() {
        assert!(generation(86_400) < 200, "{}", generation(86_400));
    }

    #[test]
    fn the_text_changes_only_in_its_trailing_comment() {
        let r = Replanned::new("SELECT 1".to_owned());
        assert_eq!(&*r.sql(), "SELECT 1\n/* plan 0 */");
        assert_eq!(&*with_generation("SELECT 1", 7), "SELECT 1\n/* plan 7 */");
    }
}
