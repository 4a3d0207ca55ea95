"""A Python service's write path with psycopg 3: each order change and the
event that tells other services about it are written in one transaction, so
both commit or neither does. `outbox relay` publishes the events afterwards.

    DATABASE_URL=postgres://... ORDER_ID=o-1 TRACEPARENT=00-... python3 producer.py

OUTBOX_MODE=wal writes for a schema migrated with `outbox migrate --mode
wal`: the same event through `outbox_emit(...)`, a logical message instead
of a row.
"""

import os

import psycopg
from psycopg.types.json import Jsonb


class Refused(Exception):
    """Any failure after the event was written: the transaction rolls back,
    and the event with it."""


# The one switch between the delivery modes: a row, or a WAL message.
if os.environ.get("OUTBOX_MODE") == "wal":
    WRITE_EVENT = "SELECT outbox_emit('order', %s, %s, %s, %s)"
else:
    WRITE_EVENT = ("INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload, headers)"
                   " VALUES ('order', %s, %s, %s, %s)")


def enqueue(conn, order_id, event_type, payload, traceparent):
    """Writes one event inside the caller's transaction. `traceparent` is
    the caller's W3C trace context; the relay carries it to the broker."""
    headers = {"traceparent": traceparent} if traceparent else {}
    conn.execute(WRITE_EVENT, (order_id, event_type, Jsonb(payload), Jsonb(headers)))


def main():
    order_id = os.environ["ORDER_ID"]
    traceparent = os.environ.get("TRACEPARENT")
    # autocommit: each `with conn.transaction()` below is one transaction.
    with psycopg.connect(os.environ["DATABASE_URL"], autocommit=True) as conn:
        # Place the order: the row and order.created commit together.
        customer, total = "Zoë Ålesund — 東京 🚚", 9007199254740993
        with conn.transaction():
            conn.execute(
                "INSERT INTO orders (id, customer, total_cents) VALUES (%s, %s, %s)",
                (order_id, customer, total),
            )
            enqueue(conn, order_id, "order.created", {
                "order_id": order_id,
                "customer": customer,
                "total_cents": total,
                "lines": [{"sku": "A-1", "qty": 2,
                           "attrs": {"gift": True, "note": 'say "hi" \\ bye'}}],
            }, traceparent)

        # Pay it. FOR UPDATE serialises writers of this order, so its
        # events are written in the order its state changed.
        with conn.transaction():
            (paid,) = conn.execute(
                "SELECT total_cents FROM orders WHERE id = %s FOR UPDATE", (order_id,)
            ).fetchone()
            conn.execute("UPDATE orders SET status = 'paid' WHERE id = %s", (order_id,))
            enqueue(conn, order_id, "order.paid",
                    {"order_id": order_id, "paid_cents": paid}, traceparent)

        # A cancellation that fails after its event was written: leaving
        # the block by an exception rolls back, and no order.cancelled ever
        # reaches a broker.
        try:
            with conn.transaction():
                conn.execute("UPDATE orders SET status = 'cancelled' WHERE id = %s", (order_id,))
                enqueue(conn, order_id, "order.cancelled", {"order_id": order_id}, traceparent)
                raise Refused("the payment provider refused the refund")
        except Refused:
            pass
    print(f"order {order_id} placed and paid; its cancellation rolled back")


if __name__ == "__main__":
    main()
