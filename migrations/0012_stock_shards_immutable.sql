-- A flash sale's stock_shards is fixed from its insert (issue 21). A shopper's
-- shard is a function of the user id and stock_shards, and the sale's stock is
-- loaded into Redis as it is created, split over that many shards: changing it
-- afterwards would move shoppers to shards without their mark (a second order)
-- and hide the orders in flight on the old shards from a repair. "Has stock in
-- Redis" cannot be judged from Postgres (a load may be under way, or Redis may
-- have lost it and a repair be coming), so the rule is the simplest safe one:
-- immutable after insert, enforced here rather than by convention.
CREATE FUNCTION seckill_stock_shards_immutable() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'stock_shards of flash sale % is fixed for the life of the sale (% -> % refused)',
        OLD.voucher_id, OLD.stock_shards, NEW.stock_shards
        USING ERRCODE = 'check_violation';
END;
$$;

CREATE TRIGGER seckill_stock_shards_immutable
    BEFORE UPDATE OF stock_shards ON seckill_vouchers
    FOR EACH ROW
    WHEN (NEW.stock_shards IS DISTINCT FROM OLD.stock_shards)
    EXECUTE FUNCTION seckill_stock_shards_immutable();
