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
//!
//! The table can also grow faster than that: while autovacuum has not yet
//! come by (or something holds PostgreSQL's xmin back) every delivered
//! event leaves its row behind, hundreds of pages in a minute at a few
//! thousand events a second. A plan made on a page or two reads the whole
//! heap where a join on a handful of rows looks cheaper that way (the
//! acknowledgement's join on `ctid`: a sequential scan, measured 3.4 ms a
//! claim at 495 pages, against a few microseconds through the row
//! locations). So the claim also reports the table's size, and the text
//! changes again each time the size reaches a new power of four from 16
//! pages on: a handful of extra plans in a table's life.

use std::sync::atomic::{AtomicU32, Ordering};
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

/// Below this many pages the table's size never changes a plan.
const SIZE_CLASS_FROM_PAGES: i64 = 16;

/// The size class of a table of `pages` pages: 0 below
/// [`SIZE_CLASS_FROM_PAGES`], then one more at each power of four.
fn size_class(pages: i64) -> u32 {
    if pages < SIZE_CLASS_FROM_PAGES {
        0
    } else {
        pages.ilog2() / 2 - 1
    }
}

/// A statement whose text names its generation in a trailing comment
/// (`pg_stat_statements` ignores it: the statements count as one).
#[derive(Debug)]
pub struct Replanned {
    text: String,
    born: Instant,
    /// The largest size class the table has been seen at (it never goes
    /// back: a plan made on a large table suits a small one).
    size: AtomicU32,
    current: Mutex<((u64, u32), Arc<str>)>,
}

impl Replanned {
    pub fn new(text: String) -> Arc<Self> {
        let first = with_generation(&text, (0, 0));
        Arc::new(Replanned {
            text,
            born: Instant::now(),
            size: AtomicU32::new(0),
            current: Mutex::new(((0, 0), first)),
        })
    }

    /// Takes in the table's size in pages, as a statement just saw it.
    pub fn table_pages(&self, pages: i64) {
        self.size.fetch_max(size_class(pages), Ordering::Relaxed);
    }

    /// The text to run now.
    pub fn sql(&self) -> Arc<str> {
        let generation = (
            generation(self.born.elapsed().as_secs()),
            self.size.load(Ordering::Relaxed),
        );
        let mut current = self.current.lock().unwrap_or_else(|e| e.into_inner());
        if current.0 != generation {
            *current = (generation, with_generation(&self.text, generation));
        }
        current.1.clone()
    }
}

fn with_generation(text: &str, (time, size): (u64, u32)) -> Arc<str> {
    format!("{text}\n/* plan {time}.{size} */").into()
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
        assert_eq!(&*r.sql(), "SELECT 1\n/* plan 0.0 */");
        assert_eq!(
            &*with_generation("SELECT 1", (7, 2)),
            "SELECT 1\n/* plan 7.2 */"
        );
    }

    #[test]
    fn the_text_changes_when_the_table_reaches_a_new_power_of_four_pages() {
        let r = Replanned::new("SELECT 1".to_owned());
        let mut texts = vec![r.sql()];
        for pages in [1, 15, 16, 40, 63, 64, 255, 256, 1_000, 70, 1, 1_024] {
            r.table_pages(pages);
            let sql = r.sql();
            if texts.last() != Some(&sql) {
                texts.push(sql);
            }
        }
        let sizes: Vec<&str> = texts
            .iter()
            .map(|t| t.rsplit('.').next().unwrap())
            .collect();
        // 16, 64, 256 and 1,024 pages each change it once; shrinking never.
        assert_eq!(sizes, ["0 */", "1 */", "2 */", "3 */", "4 */"]);
    }
}
