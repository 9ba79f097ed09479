-- How many Redis hash slots a flash sale's stock and shopper marks are spread over
-- (issue 13): one hot sale can then use several masters of a Redis Cluster. Fixed
-- for the life of the sale: a shopper's shard is a function of the user id and it.
-- Existing sales keep one shard, whose keys are the ones they always had.
ALTER TABLE seckill_vouchers
    ADD COLUMN stock_shards INT NOT NULL DEFAULT 1 CHECK (stock_shards BETWEEN 1 AND 64);
