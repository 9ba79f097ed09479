-- Units of cancelled orders on their way back to Redis. A cancellation inserts the
-- row in the same transaction as the status change and the Postgres stock +1; the
-- Redis side (lua/stock_return.lua, idempotent per order) sets done_at. Rows still
-- without done_at after a crash are finished by the recovery sweeper.
CREATE TABLE stock_returns (
    order_id   BIGINT      PRIMARY KEY REFERENCES voucher_orders (id),
    voucher_id BIGINT      NOT NULL,
    user_id    BIGINT      NOT NULL,
    created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    done_at    TIMESTAMPTZ
);

CREATE INDEX stock_returns_pending_idx ON stock_returns (created_at) WHERE done_at IS NULL;

-- The unpaid-order sweeper looks for old 'created' orders.
CREATE INDEX voucher_orders_created_idx ON voucher_orders (created_at) WHERE status = 'created';
