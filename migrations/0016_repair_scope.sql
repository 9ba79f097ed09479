-- The sales a repair under way rebuilds: NULL means every sale (a single node, a
-- first repair, or a change that cannot be placed), otherwise the vouchers with a
-- shard on a Redis Cluster master that changed (restarted, failed over, went back)
-- or whose state was found missing. Only these are closed; the others keep
-- selling, and their relays keep recording intents (see src/epoch/scope.rs).
-- `repair_scope_epoch` names the epoch whose repair wrote the scope: a scope left
-- by an earlier repair (killed, or a process of a version that does not know the
-- column took the next epoch) is not this epoch's, and counts as every sale.
ALTER TABLE redis_epochs ADD COLUMN repair_scope BIGINT[], ADD COLUMN repair_scope_epoch BIGINT;
