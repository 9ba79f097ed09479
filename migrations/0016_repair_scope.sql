-- The sales a repair under way rebuilds: NULL means every sale (a single node, a
-- first repair, or a change that cannot be placed), otherwise the vouchers with a
-- shard on a Redis Cluster master that changed (restarted, failed over, went back)
-- or whose state was found missing. Only these are closed; the others keep
-- selling, and their relays keep recording intents (see src/epoch/scope.rs).
ALTER TABLE redis_epochs ADD COLUMN repair_scope BIGINT[];
