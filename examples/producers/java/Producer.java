// A Java service's write path with the PostgreSQL JDBC driver: each order
// change and the event that tells other services about it are written in
// one transaction, so both commit or neither does. `outbox relay`
// publishes the events afterwards. JSON is written with Jackson.
//
//   JDBC_URL=jdbc:postgresql://… ORDER_ID=o-1 TRACEPARENT=00-… \
//     java -cp postgresql.jar:jackson-databind.jar:jackson-core.jar:jackson-annotations.jar Producer.java

import com.fasterxml.jackson.databind.ObjectMapper;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.util.List;
import java.util.Map;

public class Producer {
    private static final ObjectMapper JSON = new ObjectMapper();

    /** Any failure after the event was written: the transaction rolls back, and the event with it. */
    static class Refused extends Exception {
        Refused(String message) {
            super(message);
        }
    }

    interface Work {
        void run(Connection conn) throws Exception;
    }

    /** Runs {@code work} as one transaction: committed if it returns, rolled back if it throws. */
    static void inTransaction(Connection conn, Work work) throws Exception {
        conn.setAutoCommit(false);
        try {
            work.run(conn);
            conn.commit();
        } catch (Exception e) {
            conn.rollback();
            throw e;
        } finally {
            conn.setAutoCommit(true);
        }
    }

    /**
     * The one switch between the delivery modes: OUTBOX_MODE=wal writes for a schema migrated with
     * {@code outbox migrate --mode wal} (a logical message through outbox_emit instead of a row).
     */
    static final String WRITE_EVENT = "wal".equals(System.getenv("OUTBOX_MODE"))
            ? "SELECT outbox_emit('order', ?, ?, ?::jsonb, ?::jsonb)"
            : "INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload, headers)"
                    + " VALUES ('order', ?, ?, ?::jsonb, ?::jsonb)";

    /** Writes one event inside the caller's transaction; traceparent is the caller's W3C trace context. */
    static void enqueue(Connection conn, String orderId, String eventType, Object payload, String traceparent)
            throws Exception {
        Map<String, String> headers = traceparent == null ? Map.of() : Map.of("traceparent", traceparent);
        try (PreparedStatement st = conn.prepareStatement(WRITE_EVENT)) {
            st.setString(1, orderId);
            st.setString(2, eventType);
            st.setString(3, JSON.writeValueAsString(payload));
            st.setString(4, JSON.writeValueAsString(headers));
            st.execute();
        }
    }

    public static void main(String[] args) throws Exception {
        String orderId = System.getenv("ORDER_ID");
        String traceparent = System.getenv("TRACEPARENT");
        try (Connection conn = DriverManager.getConnection(System.getenv("JDBC_URL"))) {
            // Place the order: the row and order.created commit together.
            String customer = "Zoë Ålesund — 東京 🚚";
            long total = 9007199254740993L;
            inTransaction(conn, c -> {
                try (PreparedStatement st = c.prepareStatement(
                        "INSERT INTO orders (id, customer, total_cents) VALUES (?, ?, ?)")) {
                    st.setString(1, orderId);
                    st.setString(2, customer);
                    st.setLong(3, total);
                    st.executeUpdate();
                }
                enqueue(c, orderId, "order.created", Map.of(
                        "order_id", orderId,
                        "customer", customer,
                        "total_cents", total,
                        "lines", List.of(Map.of("sku", "A-1", "qty", 2,
                                "attrs", Map.of("gift", true, "note", "say \"hi\" \\ bye")))),
                        traceparent);
            });

            // Pay it. FOR UPDATE serialises writers of this order, so its
            // events are written in the order its state changed.
            inTransaction(conn, c -> {
                long paid;
                try (PreparedStatement st = c.prepareStatement(
                        "SELECT total_cents FROM orders WHERE id = ? FOR UPDATE")) {
                    st.setString(1, orderId);
                    try (ResultSet rs = st.executeQuery()) {
                        rs.next();
                        paid = rs.getLong(1);
                    }
                }
                try (PreparedStatement st = c.prepareStatement("UPDATE orders SET status = 'paid' WHERE id = ?")) {
                    st.setString(1, orderId);
                    st.executeUpdate();
                }
                enqueue(c, orderId, "order.paid", Map.of("order_id", orderId, "paid_cents", paid), traceparent);
            });

            // A cancellation that fails after its event was written: it rolls
            // back, and no order.cancelled ever reaches a broker.
            try {
                inTransaction(conn, c -> {
                    try (PreparedStatement st = c.prepareStatement(
                            "UPDATE orders SET status = 'cancelled' WHERE id = ?")) {
                        st.setString(1, orderId);
                        st.executeUpdate();
                    }
                    enqueue(c, orderId, "order.cancelled", Map.of("order_id", orderId), traceparent);
                    throw new Refused("the payment provider refused the refund");
                });
            } catch (Refused expected) {
                // rolled back
            }
        } catch (SQLException e) {
            System.err.println("producer: " + e.getMessage());
            System.exit(1);
        }
        System.out.println("order " + orderId + " placed and paid; its cancellation rolled back");
    }
}
