// A Go service's write path with pgx: each order change and the event that
// tells other services about it are written in one transaction, so both
// commit or neither does. `outbox relay` publishes the events afterwards.
//
//	DATABASE_URL=postgres://… ORDER_ID=o-1 TRACEPARENT=00-… go run .
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"os"

	"github.com/jackc/pgx/v4"
)

// errRefused stands for any failure after the event was written: the
// transaction rolls back, and the event with it.
var errRefused = errors.New("the payment provider refused the refund")

// enqueue writes one event inside the caller's transaction. traceparent is
// the caller's W3C trace context; the relay carries it to the broker.
func enqueue(ctx context.Context, tx pgx.Tx, orderID, eventType string, payload any, traceparent string) error {
	body, err := json.Marshal(payload)
	if err != nil {
		return fmt.Errorf("encoding the %s payload: %w", eventType, err)
	}
	headers := map[string]string{}
	if traceparent != "" {
		headers["traceparent"] = traceparent
	}
	head, err := json.Marshal(headers)
	if err != nil {
		return err
	}
	_, err = tx.Exec(ctx, writeEvent, orderID, eventType, string(body), string(head))
	return err
}

// writeEvent is the one switch between the delivery modes: OUTBOX_MODE=wal
// writes for a schema migrated with `outbox migrate --mode wal` (a logical
// message through outbox_emit instead of a row).
var writeEvent = func() string {
	if os.Getenv("OUTBOX_MODE") == "wal" {
		return `SELECT outbox_emit('order', $1, $2, $3::jsonb, $4::jsonb)`
	}
	return `INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload, headers)
		 VALUES ('order', $1, $2, $3::jsonb, $4::jsonb)`
}()

func main() {
	ctx := context.Background()
	orderID, traceparent := os.Getenv("ORDER_ID"), os.Getenv("TRACEPARENT")
	conn, err := pgx.Connect(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatalf("connecting: %v", err)
	}
	defer conn.Close(ctx)

	// Place the order: the row and order.created commit together.
	err = conn.BeginFunc(ctx, func(tx pgx.Tx) error {
		const customer, total = "Zoë Ålesund — 東京 🚚", int64(9007199254740993)
		if _, err := tx.Exec(ctx,
			`INSERT INTO orders (id, customer, total_cents) VALUES ($1, $2, $3)`,
			orderID, customer, total); err != nil {
			return err
		}
		return enqueue(ctx, tx, orderID, "order.created", map[string]any{
			"order_id":    orderID,
			"customer":    customer,
			"total_cents": total,
			"lines": []any{map[string]any{
				"sku": "A-1", "qty": 2,
				"attrs": map[string]any{"gift": true, "note": `say "hi" \ bye`},
			}},
		}, traceparent)
	})
	if err != nil {
		log.Fatalf("placing %s: %v", orderID, err)
	}

	// Pay it. FOR UPDATE serialises writers of this order, so its events
	// are written in the order its state changed.
	err = conn.BeginFunc(ctx, func(tx pgx.Tx) error {
		var total int64
		if err := tx.QueryRow(ctx,
			`SELECT total_cents FROM orders WHERE id = $1 FOR UPDATE`, orderID).Scan(&total); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE orders SET status = 'paid' WHERE id = $1`, orderID); err != nil {
			return err
		}
		return enqueue(ctx, tx, orderID, "order.paid",
			map[string]any{"order_id": orderID, "paid_cents": total}, traceparent)
	})
	if err != nil {
		log.Fatalf("paying %s: %v", orderID, err)
	}

	// A cancellation that fails after its event was written: BeginFunc
	// rolls back, and no order.cancelled ever reaches a broker.
	err = conn.BeginFunc(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `UPDATE orders SET status = 'cancelled' WHERE id = $1`, orderID); err != nil {
			return err
		}
		if err := enqueue(ctx, tx, orderID, "order.cancelled",
			map[string]any{"order_id": orderID}, traceparent); err != nil {
			return err
		}
		return errRefused
	})
	if !errors.Is(err, errRefused) {
		log.Fatalf("cancelling %s: expected a refusal, got %v", orderID, err)
	}
	fmt.Printf("order %s placed and paid; its cancellation rolled back\n", orderID)
}
