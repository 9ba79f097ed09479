-- Orders accepted by Redis and persisted by the worker. The id comes from the ID
-- worker (Redis timestamp + counter), so a redelivered batch inserts nothing twice.
CREATE TABLE voucher_orders (
    id           BIGINT      PRIMARY KEY,
    -- The business number from the sequence rule 'order'; NULL for failed orders.
    order_no     TEXT        UNIQUE,
    user_id      BIGINT      NOT NULL,
    voucher_id   BIGINT      NOT NULL REFERENCES vouchers (id),
    status       TEXT        NOT NULL CHECK (status IN ('created', 'paid', 'cancelled', 'failed')),
    created_at   TIMESTAMPTZ NOT NULL,
    persisted_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    paid_at      TIMESTAMPTZ,
    cancelled_at TIMESTAMPTZ,
    -- Why the database refused an order that Redis accepted (never expected).
    failure      TEXT
);

-- One live order per shopper and voucher: the database's own guard behind the Lua
-- check. Cancelled and failed orders do not count, so a shopper whose order was
-- cancelled may buy again.
CREATE UNIQUE INDEX voucher_orders_one_per_shopper
    ON voucher_orders (user_id, voucher_id)
    WHERE status IN ('created', 'paid');

CREATE INDEX voucher_orders_voucher_idx ON voucher_orders (voucher_id, status);
