-- The orders each relay is about to publish to RabbitMQ, recorded before the publish
-- in a transaction that holds the epoch row shared and checks that the epoch the
-- relay read them in is still the current one and no repair is under way. Once a
-- repair has taken a new epoch, no relay can add an intent of an older epoch, so the
-- set of orders that may be in RabbitMQ or in a worker's hands (published, not yet
-- in voucher_orders) is exactly known: the repair's barrier waits until every order
-- in an older epoch's intents is in voucher_orders or still in its outbox stream
-- (see src/epoch/barrier.rs). Rows whose orders are all stored are swept.
CREATE TABLE relay_intents (
    id          BIGINT      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    namespace   TEXT        NOT NULL,
    epoch       BIGINT      NOT NULL,
    -- order_ids[i] is an order of voucher_ids[i].
    voucher_ids BIGINT[]    NOT NULL,
    order_ids   BIGINT[]    NOT NULL CHECK (cardinality(order_ids) = cardinality(voucher_ids)),
    created_at  TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE INDEX relay_intents_epoch_idx ON relay_intents (namespace, epoch);

-- What a repair is waiting for, for operators (GET /api/v1/admin/redis): when it
-- began, and the orders it waits for (published by a relay, in no outbox, not yet in
-- Postgres: in RabbitMQ or in a worker's hands). `abandon_epoch`: an operator gave
-- up on what the repair of that epoch waits for (POST /api/v1/admin/redis/abandon),
-- e.g. messages known lost with a broker's disk; the repair goes on without them.
ALTER TABLE redis_epochs
    ADD COLUMN repair_started_at TIMESTAMPTZ,
    ADD COLUMN repair_waiting    INTEGER NOT NULL DEFAULT 0,
    ADD COLUMN repair_reason     TEXT,
    ADD COLUMN abandon_epoch     BIGINT;
