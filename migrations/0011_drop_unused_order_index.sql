-- voucher_orders_created_idx served the first unpaid-order sweeper, which looked for
-- old 'created' orders by created_at. The sweeper reads persisted_at since 0008
-- (voucher_orders_unpaid_idx) and no query filters or sorts orders by created_at
-- alone any more, so the index only cost every persisted order one more index entry.
DROP INDEX IF EXISTS voucher_orders_created_idx;
