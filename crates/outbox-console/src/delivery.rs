//! How a schema's events travel, as `outbox status` and the console show
//! it: the delivery mode and, in the WAL mode, the slot on one line.

/// The slot on one line: its name, whether a relay reads it, how far
/// behind it is and what it retains.
pub fn slot_line(slot: &outbox::SlotStatus) -> String {
    if !slot.exists {
        return format!(
            "{} MISSING: the server has no such slot (dropped, or lost in a failover): run `outbox migrate --mode wal` to create it again; events emitted meanwhile were not captured",
            slot.name
        );
    }
    if slot.invalidated {
        return format!(
            "{} INVALIDATED by the server (it held more WAL than max_slot_wal_keep_size allows): events emitted since its last confirmed position cannot be read; run `outbox migrate --mode wal` to create it again, or `outbox migrate --mode table` to deliver from the table",
            slot.name
        );
    }
    let bytes = |b: Option<i64>| b.map(|b| format!("{b} B")).unwrap_or_else(|| "-".into());
    format!(
        "{} ({}), lag {}{}, retained WAL {}{}",
        slot.name,
        if slot.active {
            "read by a relay"
        } else {
            "NOT READ: no relay is connected"
        },
        bytes(slot.lag_bytes),
        slot.lag_seconds
            .map(|s| format!(" / {s:.3} s"))
            .unwrap_or_default(),
        bytes(slot.retained_bytes),
        if slot.switch_waits_for_transactions {
            "; switching to the table mode, waiting for transactions older than the switch: run `outbox migrate --mode table` again to finish it (the table's rows wait until then)"
        } else if slot.switching_to_table {
            "; switching to the table mode: the table's rows wait until the relay has read the slot to the switch"
        } else {
            ""
        }
    )
}

/// The mode, and the slot when there is one: the console's figure.
pub fn shown(mode: outbox::DeliveryMode, slot: Option<&outbox::SlotStatus>) -> String {
    match slot {
        Some(slot) => format!("{} — slot {}", mode.name(), slot_line(slot)),
        None => mode.name().to_owned(),
    }
}
