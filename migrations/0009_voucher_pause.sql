-- Pausing a flash sale (POST /api/v1/admin/vouchers/{id}/pause, .../resume).
-- While `paused`, every API instance refuses orders with 409 sale_paused from its
-- in-process voucher cache, before any Redis call: the pause changes nothing in
-- Redis, so orders admitted before it still flow through the outbox, the queue and
-- the worker. Instances learn of a change through the voucher pub/sub event and,
-- should that be lost, from a once-a-second read of the paused sales (the partial
-- index below keeps that read small).
ALTER TABLE seckill_vouchers ADD COLUMN paused BOOLEAN NOT NULL DEFAULT false;

CREATE INDEX seckill_vouchers_paused_idx ON seckill_vouchers (voucher_id) WHERE paused;

-- Who cancelled an order: its owner, or the payment timeout (the timeout consumer
-- or the unpaid sweep). The admin console counts timed-out orders apart from the
-- ones their owners cancelled. NULL for orders cancelled before this column existed.
ALTER TABLE voucher_orders ADD COLUMN cancelled_by TEXT CHECK (cancelled_by IN ('owner', 'timeout'));
