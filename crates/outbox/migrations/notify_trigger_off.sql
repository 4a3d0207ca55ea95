DROP TRIGGER IF EXISTS outbox_insert_notify ON {schema}.outbox_events;
DROP FUNCTION IF EXISTS {schema}.notify_outbox_insert();
