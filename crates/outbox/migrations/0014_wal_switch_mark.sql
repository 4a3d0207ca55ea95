-- The switch back to the table mode is written into the stream only once
-- every transaction older than the switch has ended (`outbox_emit` of the
-- WAL mode takes no lock the switch could wait on, so an open transaction
-- may still commit a message after the switch). `switch_mark_lsn` is where
-- that mark was written: the relay ends the switch once it has confirmed
-- the slot to it, whether it read the mark in this session or in an
-- earlier one. NULL while the switch still waits for older transactions
-- (`outbox migrate --mode table` again resumes the wait).
ALTER TABLE {schema}.outbox_wal ADD COLUMN IF NOT EXISTS switch_mark_lsn PG_LSN;
