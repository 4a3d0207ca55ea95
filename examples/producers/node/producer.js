// A Node.js service's write path with node-postgres (pg): each order change
// and the event that tells other services about it are written in one
// transaction, so both commit or neither does. `outbox relay` publishes
// the events afterwards.
//
//   DATABASE_URL=postgres://… ORDER_ID=o-1 TRACEPARENT=00-… node producer.js
'use strict';

const { Client } = require('pg');

// Any failure after the event was written: the transaction rolls back, and
// the event with it.
class Refused extends Error {}

// JSON.stringify refuses BigInt, and a Number loses digits past 2^53, so
// amounts travel as BigInt and are written here as JSON integers. (The
// marker is a string no jsonb value can hold: jsonb refuses \u0000.)
function toJson(value) {
  const bigs = [];
  const text = JSON.stringify(value, (_key, v) => {
    if (typeof v !== 'bigint') return v;
    bigs.push(v.toString());
    return `\u0000big${bigs.length - 1}`;
  });
  return text.replace(/"\\u0000big(\d+)"/g, (_m, i) => bigs[Number(i)]);
}

// The one switch between the delivery modes: OUTBOX_MODE=wal writes for a
// schema migrated with `outbox migrate --mode wal` (a logical message
// through outbox_emit instead of a row).
const WRITE_EVENT = process.env.OUTBOX_MODE === 'wal'
  ? `SELECT outbox_emit('order', $1, $2, $3::jsonb, $4::jsonb)`
  : `INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload, headers)
     VALUES ('order', $1, $2, $3::jsonb, $4::jsonb)`;

// Writes one event inside the caller's transaction. traceparent is the
// caller's W3C trace context; the relay carries it to the broker.
async function enqueue(client, orderId, eventType, payload, traceparent) {
  const headers = traceparent ? { traceparent } : {};
  await client.query(WRITE_EVENT, [orderId, eventType, toJson(payload), JSON.stringify(headers)]);
}

async function inTransaction(client, work) {
  await client.query('BEGIN');
  try {
    await work();
    await client.query('COMMIT');
  } catch (err) {
    await client.query('ROLLBACK');
    throw err;
  }
}

async function main() {
  const orderId = process.env.ORDER_ID;
  const traceparent = process.env.TRACEPARENT;
  const client = new Client({ connectionString: process.env.DATABASE_URL });
  await client.connect();
  try {
    // Place the order: the row and order.created commit together.
    const customer = 'Zoë Ålesund — 東京 🚚';
    const total = 9007199254740993n;
    await inTransaction(client, async () => {
      await client.query(
        'INSERT INTO orders (id, customer, total_cents) VALUES ($1, $2, $3)',
        [orderId, customer, total.toString()],
      );
      await enqueue(client, orderId, 'order.created', {
        order_id: orderId,
        customer,
        total_cents: total,
        lines: [{ sku: 'A-1', qty: 2, attrs: { gift: true, note: 'say "hi" \\ bye' } }],
      }, traceparent);
    });

    // Pay it. FOR UPDATE serialises writers of this order, so its events
    // are written in the order its state changed. pg returns bigint
    // columns as strings, which BigInt keeps exact.
    await inTransaction(client, async () => {
      const { rows } = await client.query(
        'SELECT total_cents FROM orders WHERE id = $1 FOR UPDATE', [orderId],
      );
      await client.query("UPDATE orders SET status = 'paid' WHERE id = $1", [orderId]);
      await enqueue(client, orderId, 'order.paid',
        { order_id: orderId, paid_cents: BigInt(rows[0].total_cents) }, traceparent);
    });

    // A cancellation that fails after its event was written: it rolls
    // back, and no order.cancelled ever reaches a broker.
    try {
      await inTransaction(client, async () => {
        await client.query("UPDATE orders SET status = 'cancelled' WHERE id = $1", [orderId]);
        await enqueue(client, orderId, 'order.cancelled', { order_id: orderId }, traceparent);
        throw new Refused('the payment provider refused the refund');
      });
    } catch (err) {
      if (!(err instanceof Refused)) throw err;
    }
  } finally {
    await client.end();
  }
  console.log(`order ${orderId} placed and paid; its cancellation rolled back`);
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
