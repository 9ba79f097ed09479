-- The whole server's epoch (0006) and Redis clock (0015): since 0022 every process
-- checks each shard's own history (sale_states, shard_floors, shard_points) and
-- nothing reads or writes these two tables any more.
DROP TABLE IF EXISTS redis_clocks;
DROP TABLE IF EXISTS redis_epochs;
