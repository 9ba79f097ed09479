-- Stock added to a running sale, on its way to Redis. A top-up raises stock and
-- total_stock and inserts its row in one transaction; the Redis side
-- (lua/stock_topup.lua, idempotent per top-up id) then adds the units and sets
-- done_at. Rows still without done_at after a crash or an outage are finished by
-- the recovery pass; a repair that rebuilds a sale from Postgres (whose stock
-- already counts them) marks them done.
CREATE TABLE stock_topups (
    id         BIGSERIAL   PRIMARY KEY,
    voucher_id BIGINT      NOT NULL REFERENCES seckill_vouchers (voucher_id) ON DELETE CASCADE,
    units      INTEGER     NOT NULL CHECK (units > 0),
    created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    done_at    TIMESTAMPTZ
);

CREATE INDEX stock_topups_pending_idx ON stock_topups (created_at) WHERE done_at IS NULL;

-- The unpaid-order sweep judges an order's age by Postgres's clock (persisted_at),
-- not by the admitting instance's (created_at).
CREATE INDEX voucher_orders_unpaid_idx ON voucher_orders (persisted_at) WHERE status = 'created';
