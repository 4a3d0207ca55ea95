//! The claim: acknowledging the last batch and claiming the next, in one
//! statement, and reading what it returns.

use std::collections::HashMap;
use std::sync::atomic::Ordering;

use uuid::Uuid;

use super::{RowRefs, Store};
use crate::error::{Error, Result};
use crate::event::Event;
use crate::relay::cursor::{ClaimMeta, Start};
use crate::relay::decode;

/// A claimed batch: the events, and where each row lies (its `ctid`), for
/// a cheap acknowledgement.
#[derive(Debug, Default)]
pub struct Claimed {
    /// The events, in seq order.
    pub events: Vec<Event>,
    /// Row locations by event id.
    pub ctids: HashMap<Uuid, String>,
    /// Rows that could not be decoded, by event id, with the reason: they
    /// are in `events` (with what could be read) to be dead-lettered, never
    /// published.
    pub undecodable: HashMap<Uuid, String>,
    /// What the claim saw besides its rows, for the cursor (`None` when it
    /// returned no row).
    pub meta: Option<ClaimMeta>,
}

impl Store {
    /// Marks `acked` done and claims up to `limit` deliverable events of
    /// `partitions`, in seq order, other than `exclude` (which must contain
    /// the acknowledged ids), fresh ones from `start`'s seq on, in one
    /// statement.
    pub async fn event_ack_and_claim(
        &self,
        partitions: &[i32],
        limit: usize,
        acked: &RowRefs,
        exclude: &[Uuid],
        start: Start,
    ) -> Result<Claimed> {
        let sql = if self.xmin_wide.load(Ordering::Relaxed) {
            self.ack_and_claim_wide.sql()
        } else {
            self.ack_and_claim.sql()
        };
        let during = "acknowledging and claiming a batch";
        let mut conn = self.held.connection().await.map_err(Error::db(during))?;
        let rows = sqlx::query(&sql)
            .bind(partitions)
            .bind(limit as i64)
            .bind(&acked.ctids)
            .bind(&acked.ids)
            .bind(exclude)
            .bind(start.from)
            .bind(start.waiting_for)
            .fetch_all(&mut *conn)
            .await
            .map_err(Error::db(during))?;
        // Busy: the next claim runs on this connection too (an empty claim
        // gives it back, see `held`).
        if !rows.is_empty() {
            self.held.keep(conn);
        }
        if let Some(row) = rows.first() {
            let (pages, plain_xmin) =
                claim_tail(row).map_err(Error::db("reading the claim's snapshot"))?;
            self.ack_and_claim.table_pages(pages);
            self.ack_and_claim_wide.table_pages(pages);
            self.next_retry.table_pages(pages);
            self.xmin_wide
                .store(plain_xmin < start.waiting_for, Ordering::Relaxed);
        }
        let mut claimed = Claimed {
            events: Vec::with_capacity(rows.len()),
            ctids: HashMap::with_capacity(rows.len()),
            undecodable: HashMap::new(),
            meta: rows
                .first()
                .map(claim_meta)
                .transpose()
                .map_err(Error::db("reading the claim's snapshot"))?,
        };
        for row in rows {
            let decoded = decode::claimed_row(&row).map_err(Error::db("decoding a claimed row"))?;
            let event = match decoded.event {
                Ok(event) => event,
                Err(bad) => {
                    claimed.undecodable.insert(bad.event.id, bad.reason);
                    bad.event
                }
            };
            claimed.ctids.insert(event.id, decoded.ctid);
            claimed.events.push(event);
        }
        Ok(claimed)
    }
}

/// The table's size in pages and the snapshot's plain xmin: the columns
/// after [`claim_meta`]'s, for the store itself (which text the next claim
/// runs).
fn claim_tail(row: &sqlx::postgres::PgRow) -> std::result::Result<(i64, i64), sqlx::Error> {
    use sqlx::Row;
    Ok((row.try_get(17)?, row.try_get(18)?))
}

/// The last columns of a claim row for the cursor: the same on every row.
fn claim_meta(row: &sqlx::postgres::PgRow) -> std::result::Result<ClaimMeta, sqlx::Error> {
    use sqlx::Row;
    Ok(ClaimMeta {
        xmin: row.try_get(13)?,
        xid: row.try_get(14)?,
        seq_high: row.try_get(15)?,
        lowest_fresh: row.try_get(16)?,
    })
}
