-- Which Redis server state Postgres vouches for. Redis can go back in time (a
-- restart from an older snapshot, a failover to a lagging replica); the service
-- recognises the server by its run_id and, whenever it meets one it has not
-- verified (or the epoch marker in Redis disagrees), repairs every flash sale from
-- Postgres and from what is still in flight, then records the server here under a
-- new epoch. Counter keys carry the epoch, so a counter that went back starts
-- again from its durable mark; order messages carry the epoch they were read in,
-- so the worker knows an order that was in flight across a repair.
CREATE TABLE redis_epochs (
    namespace  TEXT        PRIMARY KEY,
    epoch      BIGINT      NOT NULL CHECK (epoch > 0),
    -- run_id of the Redis server the epoch was set up on.
    server     TEXT        NOT NULL,
    -- True from the moment a repair takes a new epoch until its sales are rebuilt.
    repairing  BOOLEAN     NOT NULL,
    updated_at TIMESTAMPTZ NOT NULL DEFAULT now()
);

-- Orders whose id another order already had (only possible if ids were ever
-- issued twice): the late one is stored under a fresh id, and the id its shopper
-- was given still finds it.
ALTER TABLE voucher_orders ADD COLUMN issued_id BIGINT;
CREATE INDEX voucher_orders_issued_idx ON voucher_orders (issued_id) WHERE issued_id IS NOT NULL;

-- Fresh ids for such orders: above 2^62, where the id worker's ids (seconds since
-- 2024 << 32 | counter) do not reach before the year 2058.
CREATE SEQUENCE order_reissued_ids;
